package pigeon

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A lagging subscriber that read the store further than the fan-out has
// routed waits among the joiners; the fan-out makes it live when it gets
// exactly there, wakes it to read on when it passes it, and a subscriber
// the fan-out is past reads on at once.
func TestJoinWaitsForTheFanout(t *testing.T) {
	newSub := func(cursor uint64) *subscription {
		s := &subscription{wake: make(chan struct{}, 1), queue: make(chan *decoded, 8), cursor: cursor}
		s.lagging.Store(true)
		return s
	}
	live := func(f *fanout, s *subscription) bool {
		return slices.Contains(f.live.AppendMatches(nil, nil), s)
	}
	woken := func(s *subscription) bool {
		select {
		case <-s.wake:
			return true
		default:
			return false
		}
	}
	msg := func(seq uint64) *decoded { return &decoded{seq: seq, m: &Message{ID: "m"}} }

	f := newFanout(nil, "chat.messages")
	ahead, passed, early := newSub(8), newSub(10), newSub(6)
	require.Equal(t, waiting, f.join(ahead), "not inited yet")
	f.unjoin(ahead)
	require.Empty(t, f.joining)

	f.cursor, f.inited = 5, true
	require.Equal(t, behind, f.join(newSub(3)))
	require.Equal(t, waiting, f.join(ahead))
	require.Equal(t, waiting, f.join(passed))
	require.Equal(t, waiting, f.join(early))

	f.route(msg(5)) // the fan-out now stands where early does
	require.False(t, early.lagging.Load(), "admitted")
	require.True(t, live(f, early))
	require.True(t, woken(early))
	require.NotContains(t, f.joining, early)
	require.False(t, woken(ahead) || woken(passed))
	require.True(t, ahead.lagging.Load())

	f.route(msg(6)) // queued to early, now live
	require.Len(t, early.queue, 1)
	f.route(msg(7))
	require.False(t, ahead.lagging.Load())
	require.True(t, woken(ahead))
	require.Empty(t, ahead.queue, "nothing before its cursor")
	f.route(msg(8))
	require.Len(t, ahead.queue, 1)
	require.Len(t, early.queue, 3)

	f.skip(10) // from 9 past passed's 10 without standing on it
	require.True(t, passed.lagging.Load(), "still behind: it reads on")
	require.False(t, live(f, passed))
	require.True(t, woken(passed))
	require.Empty(t, f.joining)

	gone := newSub(20)
	require.Equal(t, waiting, f.join(gone))
	f.remove(gone)
	require.Empty(t, f.joining, "a removed subscriber is no joiner")
}

// A subscriber's queue counts the size of what it holds: past
// liveQueueBytes it is full however few messages it holds (but a lone
// message of any size goes in), and what the loop takes out is counted
// off.
func TestLiveQueueIsBoundedInSize(t *testing.T) {
	f := newFanout(nil, "chat.messages")
	f.cursor, f.inited = 1, true
	s := &subscription{wake: make(chan struct{}, 1), queue: make(chan *decoded, liveQueue), cursor: 1}
	require.Equal(t, joined, f.join(s))
	const big = 3 << 20
	f.route(&decoded{seq: 1, m: &Message{}, size: liveQueueBytes + 1})
	require.False(t, s.lagging.Load(), "a lone message of any size goes in")
	s.take(<-s.queue)
	require.Zero(t, s.queuedBytes.Load())

	seq := uint64(2)
	for ; !s.lagging.Load(); seq++ {
		f.route(&decoded{seq: seq, m: &Message{}, size: big})
	}
	require.Len(t, s.queue, liveQueueBytes/big)
	require.Equal(t, int64(liveQueueBytes/big*big), s.queuedBytes.Load())
	for len(s.queue) > 0 {
		s.take(<-s.queue)
	}
	require.Zero(t, s.queuedBytes.Load())
}

// The recent cache keeps at most recentSize messages and, past
// recentBytes, clears the oldest, keeping the newest whatever its size;
// sizes are counted off as slots are reused or cleared.
func TestRecentRingIsBoundedInSize(t *testing.T) {
	var r recentRing
	at := func(seq uint64) bool {
		d := r.slots[seq%recentSize].Load()
		return d != nil && d.seq == seq
	}
	sum := func() int64 {
		var n int64
		for i := range r.slots {
			if d := r.slots[i].Load(); d != nil {
				n += d.size
			}
		}
		return n
	}
	for seq := uint64(1); seq <= 3*recentSize; seq++ {
		r.put(&decoded{seq: seq, m: &Message{}, size: 1000}, time.Time{})
	}
	require.True(t, at(3*recentSize) && at(2*recentSize+1), "small messages: the last recentSize are all there")
	require.Equal(t, int64(recentSize*1000), r.bytes)

	const big = 5 << 20
	for seq := uint64(3*recentSize + 1); seq <= 3*recentSize+20; seq++ {
		r.put(&decoded{seq: seq, m: &Message{}, size: big}, time.Time{})
		require.LessOrEqual(t, r.bytes, int64(recentBytes+big))
		require.True(t, at(seq))
		require.Equal(t, sum(), r.bytes)
	}
	require.False(t, at(3*recentSize), "the oldest were cleared")
	require.True(t, at(3*recentSize+20-recentBytes/big+1))

	huge := &decoded{seq: 4 * recentSize, m: &Message{}, size: 2 * recentBytes}
	r.put(huge, time.Time{})
	require.True(t, at(huge.seq), "the newest stays, whatever its size")
	require.Equal(t, huge.size, r.bytes, "everything older was cleared")
}

// A subject's recent cache is emptied once nothing was put in it since
// the sweep's cutoff; a busy subject's is kept, and an emptied cache
// fills and counts again.
func TestRecentCacheOfAQuietSubjectIsEmptied(t *testing.T) {
	var c recentCache
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	quiet, busy := c.ring("quiet"), c.ring("busy")
	for seq := uint64(1); seq <= 10; seq++ {
		quiet.put(&decoded{seq: seq, m: &Message{}, size: 100}, t0)
		busy.put(&decoded{seq: seq, m: &Message{}, size: 100}, t0.Add(2*time.Minute))
	}
	c.sweep(t0.Add(time.Minute))
	require.Zero(t, quiet.bytes)
	for i := range quiet.slots {
		require.Nil(t, quiet.slots[i].Load())
		require.Zero(t, quiet.sizes[i])
	}
	require.Equal(t, int64(1000), busy.bytes)
	require.NotNil(t, busy.slots[10].Load())

	quiet.put(&decoded{seq: 11, m: &Message{}, size: 100}, t0.Add(3*time.Minute))
	require.Equal(t, int64(100), quiet.bytes)
	c.sweep(t0.Add(time.Minute))
	require.NotNil(t, quiet.slots[11].Load(), "put since the cutoff: kept")
}
