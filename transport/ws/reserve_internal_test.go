package ws

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// TestDeliveryFramesHoldTheirBytes: a deliver or deliver_batch frame holds
// at least its own size of the write budgets, whatever its envelope. The
// reservation was the data plus 1 KiB, while envelope fields a publisher
// sets (up to 256 bytes each, 512 for reason) are written escaped, and an
// HTML-sensitive '<' is six bytes on the wire: a message of two bytes of
// data took 14 KiB a delivery while holding 1 KiB of the budgets, so a
// subscriber that stopped reading made the server hold 14 times its write
// budgets (per connection, up to its 256 frames of deliver_batch, and the
// server's across connections).
func TestDeliveryFramesHoldTheirBytes(t *testing.T) {
	ctx := context.Background()
	opts := transporttest.Options()
	opts.Store = memory.New(nil)
	e, err := pigeon.New(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, e.Shutdown(ctx))
		require.NoError(t, opts.Store.Close(ctx))
	})
	alice, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = alice.Close(ctx) })
	lt := strings.Repeat("<", pigeon.MaxEnvelopeField)
	res, err := alice.Publish(ctx, &pigeon.Message{ID: "m" + lt[1:], Type: "chat", Subject: "chat.messages", Intent: "chat",
		IdempotencyKey: lt, ReplyTo: lt, CorrelationID: lt, Reason: strings.Repeat("<", pigeon.MaxReason),
		Signature: &pigeon.Signature{KID: lt, Alg: lt, Sig: lt}, Data: []byte(`{}`)})
	require.NoError(t, err, "the broker accepts such a message")
	m := res.Message

	for _, tc := range []struct {
		name  string
		batch bool
	}{
		{"deliver frame", false},
		{"deliver_batch frame", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewServer(e, nil)
			c := newConn(ctx, srv, nil, nil, &pigeon.Principal{ID: "bob"}, "uk")
			sub := &stubSub{done: make(chan struct{})}
			ss := newServerSub(c, pigeon.Caller{}, time.Minute, true)
			ss.batch = tc.batch
			ss.sub, ss.id = sub, "sub_1"
			ss.ready()
			t.Cleanup(func() {
				c.cancel()
				close(sub.done)
				c.bg.Wait()
			})
			for range 10 {
				ss.handle(ctx, &pigeon.Delivery{Subject: "chat.messages", Attempt: 1, Message: m}, func(error) {})
			}
			ss.flush()
			var held, size int64
			for len(c.out) > 0 {
				f := <-c.out
				require.GreaterOrEqual(t, f.n, int64(len(f.b)), "a frame of %d bytes holds %d of the budgets", len(f.b), f.n)
				held, size = held+f.n, size+int64(len(f.b))
			}
			require.Positive(t, size)
			require.GreaterOrEqual(t, c.budget.inUse(), size)
			require.GreaterOrEqual(t, srv.budget.inUse(), size)
			c.unreserve(held)
		})
	}
}
