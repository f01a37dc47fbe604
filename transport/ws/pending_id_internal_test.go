package ws

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// TestSecondDeliveryOfAnIDSettlesTheFirst: a subscription's deliveries
// wait for the client's answer by message id. When a delivery of an id
// comes while another of the same id still waits (a message retention
// trimmed in flight and a new one published under its id, or a
// redelivery racing the ack wait's sweep), the first is settled as an ack
// wait that passed; it was replaced unsettled, and the engine's
// subscription held its in-flight slot for ever (after a window of such,
// it delivered nothing more).
func TestSecondDeliveryOfAnIDSettlesTheFirst(t *testing.T) {
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
	res, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"text":"hi"}`)})
	require.NoError(t, err)
	m := res.Message

	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "deliver", true: "deliver_batch"}[batch], func(t *testing.T) {
			srv := NewServer(e, nil)
			c := newConn(ctx, srv, nil, nil, &pigeon.Principal{ID: "bob"}, "uk")
			sub := &stubSub{done: make(chan struct{})}
			ss := newServerSub(c, pigeon.Caller{}, time.Minute, false)
			ss.batch = batch
			ss.sub, ss.id = sub, "sub_1"
			ss.ready()
			t.Cleanup(func() {
				c.cancel()
				close(sub.done)
				c.bg.Wait()
			})
			first, second := make(chan error, 1), make(chan error, 1)
			ss.handle(ctx, &pigeon.Delivery{Subject: "chat.messages", Attempt: 1, Message: m}, func(err error) { first <- err })
			ss.handle(ctx, &pigeon.Delivery{Subject: "chat.messages", Attempt: 2, Message: m}, func(err error) { second <- err })
			select {
			case err := <-first:
				require.ErrorIs(t, err, errAckWait)
			default:
				t.Fatal("the first delivery of the id was left unsettled")
			}
			require.True(t, ss.settle(m.ID, answer{ok: true}))
			require.NoError(t, <-second, "the client's ack settles the delivery that waits")
		})
	}
}
