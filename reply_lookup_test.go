package pigeon_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// lookupLog is a store that notes every id it is asked to look up.
type lookupLog struct {
	store.Store
	mu  sync.Mutex
	ids []string
}

func (s *lookupLog) Lookup(ctx context.Context, id string) (store.Message, error) {
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
	return s.Store.Lookup(ctx, id)
}

func (s *lookupLog) asked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestReplyLookupWaitsForReceive: a message with a correlation id on a
// request/reply subject was looked for among the stored requests before
// any gate judged it. A publisher that may not receive there (so may not
// reply) learnt which ids are stored requests, its message refused as a
// reply (OPERATION_NOT_IN_CONTRACT) when the id named one and judged as a
// publish otherwise; and the store was asked for a correlation id of any
// length. Now a message is looked for as a reply only when its contract
// grants receive on the subject and its correlation id is within the
// envelope's bounds: otherwise it is judged as a publish, whatever its
// correlation id names.
func TestReplyLookupWaitsForReceive(t *testing.T) {
	st := &lookupLog{Store: memory.New(nil)}
	f := twoRequesterFixture(t, nil, func(o *pigeon.Options) { o.Store = st })
	checkout := f.connect("checkout-token", "payments.authorize")
	other := f.connect("checkout-two-token", "payments.authorize")

	req, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)

	answer := func(correlationID string) (pigeon.Code, error) {
		m := demo.Payment("o-" + correlationID[:min(8, len(correlationID))])
		m.CorrelationID = correlationID
		_, err := other.Publish(ctx, m)
		return pigeon.ErrorCode(err), err
	}
	known, errKnown := answer(req.Message.ID)
	unknown, errUnknown := answer("msg-never-stored")
	require.Equal(t, unknown, known, "a stored request's id and an unknown one are answered alike (%v, %v)", errKnown, errUnknown)
	require.Equal(t, pigeon.CodeOK, known, "judged as the publish it is: %v", errKnown)

	// The replier, which receives on the subject: a correlation id beyond
	// the envelope's bounds is refused without a lookup, and a reply to
	// the stored request is one.
	gateway := f.connect("gateway-token", "payments.authorize")
	long := strings.Repeat("c", pigeon.MaxEnvelopeField+1)
	_, err = gateway.Publish(ctx, demo.Approval(long))
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	require.False(t, st.asked(long), "the store was asked for a correlation id beyond the envelope's bounds")
	res, err := gateway.Publish(ctx, demo.Approval(req.Message.ID))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
}
