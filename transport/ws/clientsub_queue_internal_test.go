package ws

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// queueSub is an acknowledged subscription, sub_1 on the session's
// connection, whose queue a test fills with deliverOne and empties by
// hand, as the reader and a worker do.
func queueSub() (*Session, *clientConn, *clientSub) {
	s := &Session{o: dialOptions{logger: slog.New(slog.DiscardHandler)}}
	cs := &clientSub{s: s, subject: "payments.events"}
	cs.cond.L = &cs.mu
	s.bySID = map[string]*clientSub{"sub_1": cs}
	cc := &clientConn{ctx: context.Background()}
	s.cc, cs.sidConn = cc, cc
	return s, cc, cs
}

// TestQueueKeepsItsArray: deliveries queued while a worker takes them
// from the front, as a busy subscription's are, keep to one array: the
// queue moves back to its start rather than have a new array grown, so
// that the steady flow allocates nothing for it.
func TestQueueKeepsItsArray(t *testing.T) {
	s, cc, cs := queueSub()
	msgs := make([]*pigeon.Message, 3)
	for i := range msgs {
		msgs[i] = &pigeon.Message{ID: "m" + strconv.Itoa(i), Sequence: uint64(i + 1)}
	}
	cycle := func() {
		for _, m := range msgs {
			s.deliverOne(cc, "sub_1", m, 1, nil)
		}
		cs.mu.Lock()
		for range msgs {
			cs.handled(cs.take(0).m.Sequence)
		}
		cs.mu.Unlock()
		cs.running.Add(-len(msgs))
	}
	cycle() // the first makes the array and the map of resume positions
	require.Zero(t, testing.AllocsPerRun(100, cycle))
}

// TestQueueOrder: whatever the mix of deliveries queued and taken (from
// the front, or past parked ones), the queue hands them over in the
// order queued, and holds nothing it no longer queues.
func TestQueueOrder(t *testing.T) {
	s, cc, cs := queueSub()
	rng := rand.New(rand.NewPCG(1, 2))
	var want []uint64
	next := uint64(1)
	for range 20000 {
		cs.mu.Lock()
		n := len(cs.queue)
		cs.mu.Unlock()
		switch op := rng.IntN(10); {
		case n == 0 || (op < 5 && n < 200):
			s.deliverOne(cc, "sub_1", &pigeon.Message{ID: "m" + strconv.FormatUint(next, 10), Sequence: next}, 1, nil)
			want = append(want, next)
			next++
		default:
			i := 0
			if op == 9 {
				i = rng.IntN(n) // past parked deliveries
			}
			cs.mu.Lock()
			q := cs.take(i)
			cs.mu.Unlock()
			cs.running.Done()
			require.Equal(t, want[i], q.m.Sequence)
			want = append(want[:i], want[i+1:]...)
		}
		cs.mu.Lock()
		require.Len(t, cs.queue, len(want))
		for j, q := range cs.queue {
			require.Equal(t, want[j], q.m.Sequence)
		}
		for _, q := range cs.qbuf[len(cs.qbuf)-(cap(cs.queue)-len(cs.queue)):] {
			require.Nil(t, q.m, "a slot past the queue holds nothing")
		}
		cs.mu.Unlock()
	}
}

// TestAckBuffersKept: the acknowledgements gathered between two ack
// frames go in a buffer that the frame before them left, so that a
// flush of many costs no more allocations than a flush of one.
func TestAckBuffersKept(t *testing.T) {
	_, _, cs := queueSub()
	cs.ackKick = make(chan struct{}, 1)
	// A connection that has ended: each ack frame fails at once, after
	// what any frame costs.
	cc := &clientConn{ended: true, err: pigeon.NewError(pigeon.CodeSessionClosed, "closed"), pq: newPubQueue(), pending: map[string]*pendingCall{}}
	q := queuedDelivery{cc: cc, sid: "sub_1"}
	flush := func(n int) func() {
		return func() {
			for i := range n {
				cs.settle(q, "m", uint64(i+1), nil)
			}
			cs.flushAcks(time.Second)
		}
	}
	flush(64)()
	for range 100 {
		flush(1)() // past the frame ids strconv has made already
	}
	one := testing.AllocsPerRun(100, flush(1))
	many := testing.AllocsPerRun(100, flush(64))
	require.Equal(t, one, many, "64 acks a frame cost what one does")
}
