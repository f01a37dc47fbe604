package ws

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestHandleOnAnEndedConnection: a delivery handed to a subscription of a
// connection that has ended, before the subscription itself is ended (a
// redelivery of what the end of the connection just gave back races into
// it), is given back as undelivered at once, before handle returns: not
// registered as pending, not queued on the write queue no writer will
// take. Before, it was queued and then failed by the sweeper as a spent
// attempt, so that the client's next connection saw it one attempt late.
func TestHandleOnAnEndedConnection(t *testing.T) {
	for _, tc := range []struct {
		name          string
		batch, atMost bool
	}{
		{"deliver frame", false, false},
		{"deliver_batch frame", true, false},
		{"at most once", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewServer(nil, nil)
			c := newConn(context.Background(), srv, nil, nil, &pigeon.Principal{ID: "crew"}, "uk")
			c.cancel() // the connection ended; its subscriptions are not ended yet
			sub := &stubSub{done: make(chan struct{})}
			ss := newServerSub(c, pigeon.Caller{}, time.Minute, tc.atMost)
			ss.batch = tc.batch
			ss.sub, ss.id = sub, "sub_1"
			ss.ready()
			t.Cleanup(func() {
				close(sub.done)
				c.bg.Wait()
			})

			var (
				mu  sync.Mutex
				got []error
			)
			d := &pigeon.Delivery{Subject: "jobs.run", Attempt: 2, Message: &pigeon.Message{ID: "msg_1", Type: "job",
				Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"n":1}`)}}
			ss.handle(context.Background(), d, func(err error) {
				mu.Lock()
				got = append(got, err)
				mu.Unlock()
			})
			ss.flush() // a batch gathered would leave now

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 1, "settled before handle returned")
			require.True(t, errors.Is(got[0], pigeon.ErrUndelivered), "given back uncounted: %v", got[0])
			require.Empty(t, ss.pending, "nothing waits for an answer")
			require.Empty(t, c.out, "nothing queued")
			require.Zero(t, srv.budget.inUse(), "no write budget held")
		})
	}
}

// TestWireState: whichever of the writer and the end of the connection
// comes first decides a frame's fate, once, for every delivery it holds.
func TestWireState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps string // w: the writer claims the frame, d: the end of the connection withholds it
		want  []bool // what each step reports
	}{
		{"written, then the connection ends", "wd", []bool{true, false}},
		{"withheld, then the writer comes to it", "dw", []bool{true, false}},
		{"withheld, for each delivery of a batch", "ddd", []bool{true, true, true}},
		{"written, for each delivery of a batch", "wdd", []bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := new(wireState)
			var got []bool
			for _, s := range tc.steps {
				if s == 'w' {
					got = append(got, w.write())
				} else {
					got = append(got, w.drop())
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
	var none *wireState // a frame no answer waits for
	require.True(t, none.write(), "always written")
	require.False(t, none.drop(), "never counted as withheld")
}

// stubSub is an engine subscription that ends when the test says.
type stubSub struct{ done chan struct{} }

func (s *stubSub) ID() string                        { return "sub_1" }
func (s *stubSub) Unsubscribe(context.Context) error { return nil }
func (s *stubSub) Done() <-chan struct{}             { return s.done }
func (s *stubSub) Err() error                        { return nil }

var _ pigeon.Subscription = (*stubSub)(nil)
