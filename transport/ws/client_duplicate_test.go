package ws_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// deliverAttempt is a deliver frame of msg_<id> at sequence seq, its
// attempt th delivery.
func deliverAttempt(sub, id string, seq uint64, attempt int) string {
	return strings.Replace(deliverSeq(sub, id, seq), `"attempt":1`, `"attempt":`+strconv.Itoa(attempt), 1)
}

// runRecorder is a handler that records, per message id, how many times
// it ran and whether two runs of one id ever overlapped. The first run of
// msg_1 blocks until release is closed; the others return at once. Every
// run of another id is sent on others.
type runRecorder struct {
	mu      sync.Mutex
	running map[string]int
	runs    map[string]int
	overlap []string // ids that ran twice at once
	entered chan struct{}
	release chan struct{}
	others  chan string
}

func newRunRecorder(t *testing.T) *runRecorder {
	r := &runRecorder{
		running: map[string]int{},
		runs:    map[string]int{},
		entered: make(chan struct{}),
		release: make(chan struct{}),
		others:  make(chan string, 1024),
	}
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
	})
	return r
}

func (r *runRecorder) handle(_ context.Context, d *pigeon.Delivery) error {
	id := d.Message.ID
	r.mu.Lock()
	if r.running[id] > 0 {
		r.overlap = append(r.overlap, id)
	}
	r.running[id]++
	r.runs[id]++
	first := id == "msg_1" && r.runs[id] == 1
	r.mu.Unlock()
	if first {
		close(r.entered)
		<-r.release // the first run outlives the redelivery
	}
	r.mu.Lock()
	r.running[id]--
	r.mu.Unlock()
	if id != "msg_1" {
		r.others <- id
	}
	return nil
}

// runsOf is how many times id ran, and the ids that ran twice at once.
func (r *runRecorder) runsOf(id string) (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id], append([]string(nil), r.overlap...)
}

// noSecondRun fails the test when msg_1 runs a second time, or any id
// twice at once, within a while: with the first run blocked, a second
// delivery of it must wait.
func (r *runRecorder) noSecondRun(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		n, overlap := r.runsOf("msg_1")
		require.Empty(t, overlap, "a message's handler ran twice at once")
		require.Equal(t, 1, n, "msg_1 ran again while its first run had not returned")
		time.Sleep(5 * time.Millisecond)
	}
}

// ackedIDs is every message id the server was sent an ack of on conn
// (0: any) for sub ("": any), in order.
func ackedIDs(srv *connServer, conn int, sub string) []string {
	var ids []string
	for _, f := range srv.seen(ws.OpAck) {
		if (conn != 0 && f.conn != conn) || (sub != "" && f.f.Sub != sub) {
			continue
		}
		if f.f.MessageID != "" {
			ids = append(ids, f.f.MessageID)
		}
		ids = append(ids, f.f.MessageIDs...)
	}
	return ids
}

func count(ids []string, id string) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// redelivered subscribes with inFlight workers on a server that delivers
// msg_1, msg_1 again (its ack wait passed) and msg_2, and returns once the
// first run of msg_1 is blocked and msg_2, queued after the redelivery,
// has run.
func redelivered(t *testing.T, inFlight int) (*connServer, pigeon.Subscription, *runRecorder) {
	t.Helper()
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return []string{
				subscribedFrame(f, "s1"),
				deliverAttempt("s1", "1", 1, 1),
				deliverAttempt("s1", "1", 1, 2), // the server's ack wait passed
				deliverSeq("s1", "2", 2),
			}
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	})
	s := srv.dial(t)
	r := newRunRecorder(t)
	sub, err := s.Subscribe(context.Background(), "chat.messages", r.handle, pigeon.WithMaxInFlight(inFlight))
	require.NoError(t, err)
	within(t, r.entered, "the first run of msg_1")
	require.Equal(t, "msg_2", <-r.others)
	return srv, sub, r
}

// A message delivered again while its handler still ran (the server's
// ack wait passed and it redelivered) was handed to a second worker of a
// subscription with WithMaxInFlight above 1: the handler ran twice at
// once on the same message. A delivery of a message whose handler runs is
// now parked until that run returns, then runs in turn, and is answered.
func TestARedeliveryWaitsForTheRunningHandlerOfItsMessage(t *testing.T) {
	srv, _, r := redelivered(t, 4)
	r.noSecondRun(t)
	close(r.release)
	eventually(t, func() bool { n, _ := r.runsOf("msg_1"); return n == 2 }, "the redelivery runs once the first run returned")
	_, overlap := r.runsOf("msg_1")
	require.Empty(t, overlap)
	eventually(t, func() bool { return count(ackedIDs(srv, 1, "s1"), "msg_1") == 2 }, "both deliveries of msg_1 acked")
	require.Equal(t, 1, count(ackedIDs(srv, 1, "s1"), "msg_2"))
}

// A subscription resumed on a new connection (Reconnect) while a handler
// of the old connection's delivery still ran got that message again on
// the new connection, and a second worker ran the handler on it at once.
// The new delivery now waits for the old run; each is answered on its own
// connection (the old one's ack, which the server no longer expects,
// fails quietly).
func TestAResumedDeliveryWaitsForTheOldConnectionsHandler(t *testing.T) {
	srv := newConnServer(t, func(conn int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			if conn == 1 {
				return []string{subscribedFrame(f, "s1"), deliverSeq("s1", "1", 1)}
			}
			return []string{subscribedFrame(f, "s2"), deliverSeq("s2", "1", 1), deliverSeq("s2", "2", 2)}
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	})
	logs := &logCount{}
	s := srv.dial(t, ws.WithLogger(slog.New(warnings{logs})))
	r := newRunRecorder(t)
	sub, err := s.Subscribe(context.Background(), "chat.messages", r.handle, pigeon.WithMaxInFlight(4))
	require.NoError(t, err)
	within(t, r.entered, "the first run of msg_1")
	require.NoError(t, s.Reconnect(context.Background()))
	subs := srv.seen(ws.OpSubscribe)
	require.Len(t, subs, 2)
	require.JSONEq(t, `{"sequence":1}`, string(subs[1].f.Start), "resumed at the message still handled")
	require.Equal(t, "msg_2", <-r.others)
	r.noSecondRun(t)
	close(r.release)
	eventually(t, func() bool { n, _ := r.runsOf("msg_1"); return n == 2 }, "the new connection's delivery runs once the old run returned")
	_, overlap := r.runsOf("msg_1")
	require.Empty(t, overlap)
	eventually(t, func() bool { return count(ackedIDs(srv, 2, "s2"), "msg_1") == 1 }, "acked on the new connection")
	require.Equal(t, "s2", sub.ID())
	require.Zero(t, logs.count(""), "nothing above debug logged")
}

// Deliveries parked behind a running handler of their message count
// against the subscription's window: beyond it, the client leaves them
// unanswered as it does any delivery past the window. They run in turn
// once the first run returns.
func TestParkedDeliveriesCountAgainstTheWindow(t *testing.T) {
	const window = ws.DefaultWindow
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return []string{subscribedFrame(f, "s1"), deliverAttempt("s1", "1", 1, 1)}
		case ws.OpAck:
			if f.MessageID != "flood" {
				break
			}
			// With the first run blocked: a window of copies parked, one
			// more, and another message.
			out := []string{okFrame(f)}
			for i := range window + 1 {
				out = append(out, deliverAttempt("s1", "1", 1, i+2))
			}
			return append(out, deliverSeq("s1", "2", 2))
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	})
	logs := &logCount{}
	s := srv.dial(t, ws.WithLogger(slog.New(logs)))
	r := newRunRecorder(t)
	_, err := s.Subscribe(context.Background(), "chat.messages", r.handle, pigeon.WithMaxInFlight(2))
	require.NoError(t, err)
	within(t, r.entered, "the first run of msg_1")
	require.NoError(t, s.Ack(context.Background(), "chat.messages", "flood"))
	eventually(t, func() bool { return logs.count("beyond the subscription's window") == 2 }, "the overflow noticed")
	r.noSecondRun(t)
	close(r.release)
	// The window of parked deliveries runs; the two beyond it (a copy of
	// msg_1 and msg_2) were left for the server's ack wait.
	eventually(t, func() bool { n, _ := r.runsOf("msg_1"); return n == 1+window }, "the parked deliveries run")
	_, overlap := r.runsOf("msg_1")
	require.Empty(t, overlap)
	eventually(t, func() bool { return count(ackedIDs(srv, 1, "s1"), "msg_1") == 1+window }, "each acked")
	select {
	case id := <-r.others:
		t.Fatalf("%s, beyond the window, was handled", id)
	default:
	}
}

// Deliveries parked behind a running handler of their message are let go
// with the queue when the subscription stops: they never run, and leave
// nothing running behind.
func TestParkedDeliveriesAreLetGoOnUnsubscribe(t *testing.T) {
	_, sub, r := redelivered(t, 2)
	// Stops the subscription; gives up waiting for the blocked run.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, sub.Unsubscribe(ctx), context.DeadlineExceeded)
	close(r.release)
	within(t, sub.Done(), "the subscription's end")
	n, overlap := r.runsOf("msg_1")
	require.Empty(t, overlap)
	require.Equal(t, 1, n, "the parked delivery was let go")
}

// warnings passes on the records above debug.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l > slog.LevelDebug }
func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level <= slog.LevelDebug {
		return nil
	}
	return w.Handler.Handle(ctx, r)
}
