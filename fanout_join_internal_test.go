package pigeon

import (
	"slices"
	"testing"

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
