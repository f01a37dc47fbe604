package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// contractPanicStore panics when asked to keep a contract negotiated for
// Bob, as a store (or anything a negotiation calls) with a bug might on
// what one client asked for.
type contractPanicStore struct{ store.Store }

func (s contractPanicStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	if c.Principal == transporttest.Bob {
		panic("negotiating for " + c.Principal + ", card 4111111111111111")
	}
	return s.Store.PutContract(ctx, c)
}

// TestNegotiatePanicClosesOnlyItsConnection: a negotiate frame,
// worked on inline on the connection's read loop rather than on an op
// worker, that panics is answered INTERNAL and its connection closed, as
// any op's panic is (survive); the panic is logged, a card number in it
// redacted, and the server and its other connections go on. Before,
// net/http recovered the panic on the upgrade's goroutine, logging it
// with the card number whole, but left the hijacked connection open and
// unanswered, never torn down: the client waited until its own deadline
// (REQUEST_TIMEOUT).
func TestNegotiatePanicClosesOnlyItsConnection(t *testing.T) {
	logs := &testlog.Buffer{}
	v := newEnv(t, &ws.Options{Logger: logs.Logger()}, func(o *pigeon.Options) {
		o.Store = contractPanicStore{memory.New(nil)}
	})
	ctx := context.Background()
	alice, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = alice.Close(ctx) })

	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	bob, err := ws.Dial(dctx, v.url, "bob-token", []string{"chat.messages"})
	if bob != nil {
		_ = bob.Close(ctx)
	}
	require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
	require.Contains(t, logs.String(), "a websocket op panicked")
	require.NotContains(t, logs.String(), "4111111111111111")

	res, err := alice.Publish(ctx, chatMsg("the broker goes on"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
}
