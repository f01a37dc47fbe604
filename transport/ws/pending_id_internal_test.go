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
	m := publishedChat(t, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"text":"hi"}`)})
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "deliver", true: "deliver_batch"}[batch], func(t *testing.T) {
			ss, _ := readySub(t, m.e, batch, false)
			first, second := make(chan error, 1), make(chan error, 1)
			ss.handle(context.Background(), &pigeon.Delivery{Subject: "chat.messages", Attempt: 1, Message: m.Message}, func(err error) { first <- err })
			ss.handle(context.Background(), &pigeon.Delivery{Subject: "chat.messages", Attempt: 2, Message: m.Message}, func(err error) { second <- err })
			select {
			case err := <-first:
				require.ErrorIs(t, err, errAckWait)
			default:
				t.Fatal("the first delivery of the id was left unsettled")
			}
			require.True(t, ss.settle(m.ID, 0, answer{ok: true}))
			require.NoError(t, <-second, "the client's ack settles the delivery that waits")
		})
	}
}

// published is a message alice published on chat.messages of e.
type published struct {
	*pigeon.Message
	e *pigeon.Engine
}

// publishedChat starts an engine on the test catalog and publishes m on
// it as alice; both end with the test.
func publishedChat(t *testing.T, m *pigeon.Message) published {
	t.Helper()
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
	res, err := alice.Publish(ctx, m)
	require.NoError(t, err)
	return published{res.Message, e}
}

// readySub is a ready subscription sub_1 of bob's connection to a server
// of e, ended with the test.
func readySub(t *testing.T, e *pigeon.Engine, batch, atMost bool) (*serverSub, *conn) {
	t.Helper()
	srv := NewServer(e, nil)
	c := newConn(context.Background(), srv, nil, nil, &pigeon.Principal{ID: "bob"}, "uk")
	sub := &stubSub{done: make(chan struct{})}
	ss := newServerSub(c, pigeon.Caller{}, time.Minute, atMost)
	ss.batch = batch
	ss.sub, ss.id = sub, "sub_1"
	ss.ready()
	t.Cleanup(func() {
		c.cancel()
		close(sub.done)
		c.bg.Wait()
	})
	return ss, c
}
