package pigeon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// hopsEngine is an engine with one pub/sub subject, "hops", whose last
// gate keeps the Hops it judged of each message id.
type hopsEngine struct {
	e      *pigeon.Engine
	sess   pigeon.Session
	live   chan *pigeon.Delivery
	mu     sync.Mutex
	judged map[string]uint32
}

func newHopsEngine(t *testing.T) *hopsEngine {
	h := &hopsEngine{judged: map[string]uint32{}, live: make(chan *pigeon.Delivery, 16)}
	keep := pigeon.GateFunc("keep", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		h.mu.Lock()
		h.judged[a.Message.ID] = a.Message.Hops
		h.mu.Unlock()
		return pigeon.Allow()
	})
	const who = "spiffe://test/hops"
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: who}),
		Gates:         []pigeon.Gate{keep},
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "hops", Version: "v1", Intents: []string{"test"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{who}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{who}}},
			},
		}}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	h.e = e
	h.sess, err = e.Connect(ctx, "t", []string{"hops"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.sess.Close(context.Background()) })
	_, err = h.sess.Subscribe(ctx, "hops", func(_ context.Context, d *pigeon.Delivery) error {
		h.live <- d
		return nil
	})
	require.NoError(t, err)
	return h
}

// requireHops requires that the message res accepted was judged, answered,
// stored and delivered with hops, and that the text receivers get says so.
func (h *hopsEngine) requireHops(t *testing.T, res *pigeon.Result, hops uint32) {
	t.Helper()
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	id := res.Message.ID
	h.mu.Lock()
	judged, ok := h.judged[id]
	h.mu.Unlock()
	require.True(t, ok, "accepted without passing the gates")
	require.Equal(t, hops, judged, "judged")
	require.Equal(t, hops, res.Message.Hops, "the publisher's result")
	var d *pigeon.Delivery
	select {
	case d = <-h.live:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	require.Equal(t, id, d.Message.ID)
	require.Equal(t, hops, d.Message.Hops, "live delivery")
	text, err := pigeon.DecodeMessage(d.AppendMessageJSON(nil))
	require.NoError(t, err)
	require.Equal(t, hops, text.Hops, "the delivered text: %s", d.AppendMessageJSON(nil))
	stored, err := h.e.Message(ctx, callerOf(h.sess), id)
	require.NoError(t, err)
	require.Equal(t, hops, stored.Hops, "read back from the store")
}

// TestPublisherCannotSetHops: a message's Hops is how many programs deep
// it is, which bounds a loop of programs across the nodes of a cluster.
// A publisher that wrote its own (0 to start a program loop afresh, or
// MaxHops to have a program's emits refused) would defeat the bound or
// silence the programs; the broker writes the caller's instead, before
// the gates, so what they judge is what is stored and delivered.
func TestPublisherCannotSetHops(t *testing.T) {
	h := newHopsEngine(t)
	decoded, err := pigeon.DecodeMessage([]byte(`{"type":"t","subject":"hops","intent":"test","data":{},"hops":99}`))
	require.NoError(t, err)
	require.EqualValues(t, 99, decoded.Hops, "the decoder reads what the text says")
	for _, tc := range []struct {
		name   string
		m      *pigeon.Message
		caller uint32 // the caller's Hops; 0: publish through the session
	}{
		{"set in the message", &pigeon.Message{Type: "t", Subject: "hops", Intent: "test", Hops: 99}, 0},
		{"set in the text", decoded, 0},
		{"the largest", &pigeon.Message{Type: "t", Subject: "hops", Intent: "test", Hops: 1<<32 - 1}, 0},
		{"a program's caller", &pigeon.Message{Type: "t", Subject: "hops", Intent: "test", Hops: 99}, 3},
		{"a program's caller, none in the message", &pigeon.Message{Type: "t", Subject: "hops", Intent: "test"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res *pigeon.Result
			var err error
			if tc.caller == 0 {
				res, err = h.sess.Publish(ctx, tc.m)
			} else {
				c := callerOf(h.sess)
				c.Hops = tc.caller
				res, err = h.e.Publish(ctx, c, tc.m)
			}
			require.NoError(t, err)
			h.requireHops(t, res, tc.caller)
		})
	}
	t.Run("a batch", func(t *testing.T) {
		c := callerOf(h.sess)
		c.Hops = 2
		out := h.e.PublishBatch(ctx, c, []*pigeon.Message{{Type: "t", Subject: "hops", Intent: "test", Hops: 99}})
		require.Len(t, out, 1)
		require.NoError(t, out[0].Err)
		h.requireHops(t, out[0].Result, 2)
	})
}
