package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// The tests below keep messages an hour. Messages published at the start
// are trimmed by a retention pass 61 minutes on; progress written 50
// minutes on is not pruned by it.
const (
	floorKeep  = time.Hour
	floorWrite = 50 * time.Minute
	floorTrim  = 11 * time.Minute // after floorWrite
)

// receiveIDs pulls up to max messages of subject and returns their ids.
func receiveIDs(t *testing.T, s pigeon.Session, subject string, max int) []string {
	t.Helper()
	msgs, err := s.Receive(ctx, subject, max)
	require.NoError(t, err)
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestNewGroupStartsPastTrimmedMessages: a group created on a subject
// whose first messages retention trimmed starts with its floor below the
// first retained one, so the messages it acks advance the floor rather
// than wait above it for good.
func TestNewGroupStartsPastTrimmedMessages(t *testing.T) {
	f, st := retentionFixture(t, floorKeep)
	boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")
	publishTasks(t, boss, 1, 5)
	f.clock.Advance(floorKeep + time.Minute)
	kept := publishTasks(t, boss, 6, 10)
	f.e.EnforceRetention(ctx)
	first, _, err := st.Bounds(ctx, "tasks.run")
	require.NoError(t, err)
	require.Equal(t, uint64(6), first)

	got := newHandled()
	consume(t, f, alice, got, "fresh", 5)
	require.ElementsMatch(t, kept, got.ids("fresh"), "each retained message once")
	requireProgress(t, st, "tasks.run", "fresh", store.GroupState{Floor: 10})
}

// TestGroupBehindRetentionGetsItsFloorRaised: a group in memory that fell
// behind retention — one message acked, one leased and never acked, the
// rest unread when they were trimmed — has its floor raised by the pass
// that trims them: the lease of the trimmed message goes (it does not keep
// the group in memory, nor come back), and the group hands out each
// retained message once, its floor following the acks.
func TestGroupBehindRetentionGetsItsFloorRaised(t *testing.T) {
	f, st := retentionFixture(t, floorKeep)
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	old := publishTasks(t, boss, 1, 5)
	f.clock.Advance(floorWrite)
	require.Equal(t, old[:2], receiveIDs(t, bob, "tasks.run", 2))
	require.NoError(t, bob.Ack(ctx, "tasks.run", old[0]))
	kept := publishTasks(t, boss, 6, 10)
	require.True(t, f.e.GroupLoaded("tasks.run", pigeon.DefaultGroup), "held by the lease of the second message")

	f.clock.Advance(floorTrim)
	f.e.EnforceRetention(ctx)
	requireProgress(t, st, "tasks.run", pigeon.DefaultGroup, store.GroupState{Floor: 5})
	require.False(t, f.e.GroupLoaded("tasks.run", pigeon.DefaultGroup), "the trimmed message's lease went with it")
	requireCode(t, bob.Ack(ctx, "tasks.run", old[1]), pigeon.CodeMessageNotFound)

	var got []string
	for _, max := range []int{2, 2, 2} {
		ids := receiveIDs(t, bob, "tasks.run", max)
		for _, id := range ids {
			require.NoError(t, bob.Ack(ctx, "tasks.run", id))
		}
		got = append(got, ids...)
	}
	require.Equal(t, kept, got, "each retained message once, in order")
	f.clock.Advance(time.Hour) // any lease would have run out
	require.Empty(t, receiveIDs(t, bob, "tasks.run", 10))
	requireProgress(t, st, "tasks.run", pigeon.DefaultGroup, store.GroupState{Floor: 10})
}

// TestHeldGroupFloorRaisedByRetention: a group a subscriber holds in
// memory, with nothing handed out, has its floor raised by the retention
// pass that trims the messages below it, and its subscriber is handed each
// retained message once.
func TestHeldGroupFloorRaisedByRetention(t *testing.T) {
	f, st := retentionFixture(t, floorKeep)
	boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")
	release, err := f.e.HoldGroup(ctx, "tasks.run", "held")
	require.NoError(t, err)
	publishTasks(t, boss, 1, 5)
	f.clock.Advance(floorKeep + time.Minute)
	kept := publishTasks(t, boss, 6, 10)
	f.e.EnforceRetention(ctx)
	requireProgress(t, st, "tasks.run", "held", store.GroupState{Floor: 5})

	got := newHandled()
	sub, err := alice.Subscribe(ctx, "tasks.run", got.handler("held"), pigeon.WithGroup("held"))
	require.NoError(t, err)
	release() // the subscriber holds it now: it stays in memory
	require.Eventually(t, func() bool { return len(got.ids("held")) >= len(kept) }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	require.ElementsMatch(t, kept, got.ids("held"), "each retained message once")
	requireProgress(t, st, "tasks.run", "held", store.GroupState{Floor: 10})
}

// TestPullCursorFloorPastTrimmedMessages: a pull cursor that fell behind
// retention, and one that starts after it trimmed, read each retained
// message once and keep a floor with nothing done above it.
func TestPullCursorFloorPastTrimmedMessages(t *testing.T) {
	f, st := retentionFixture(t, floorKeep)
	alice, bob := f.connect("alice-token", "chat.messages"), f.connect("bob-token", "chat.messages")
	publish := func(n int) []string {
		var ids []string
		for i := range n {
			r, err := alice.Publish(ctx, chat(i))
			require.NoError(t, err)
			ids = append(ids, r.Message.ID)
		}
		return ids
	}
	old := publish(5)
	f.clock.Advance(floorWrite)
	require.Equal(t, old[:3], receiveIDs(t, bob, "chat.messages", 3))
	kept := publish(5)
	f.clock.Advance(floorTrim)
	f.e.EnforceRetention(ctx)

	for _, c := range []struct {
		s         pigeon.Session
		principal string
	}{{bob, transporttest.Bob}, {alice, transporttest.Alice}} { // behind, and new
		require.Equal(t, kept[:2], receiveIDs(t, c.s, "chat.messages", 2))
		require.Equal(t, kept[2:], receiveIDs(t, c.s, "chat.messages", 10))
		require.Empty(t, receiveIDs(t, c.s, "chat.messages", 10))
		requireProgress(t, st, "chat.messages", "cursor:"+c.principal, store.GroupState{Floor: 10})
	}
}

// TestRedeliveryOfTrimmedMessage: when a lease runs out on a message that
// was trimmed outside this engine's retention pass (as by another node of
// a cluster), the redelivery finds it gone and raises the floor past every
// trimmed message, so the retained ones acked after it advance the floor.
func TestRedeliveryOfTrimmedMessage(t *testing.T) {
	f, st := retentionFixture(t, 0)
	boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	old := publishTasks(t, boss, 1, 5)
	require.Equal(t, old[:2], receiveIDs(t, bob, "tasks.run", 2))
	f.clock.Advance(time.Minute) // past the ack wait
	kept := publishTasks(t, boss, 6, 10)
	n, err := st.TrimBefore(ctx, "tasks.run", f.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 5, n)

	ids := receiveIDs(t, bob, "tasks.run", 10)
	require.Equal(t, kept, ids, "the trimmed messages whose leases ran out are not handed out")
	for _, id := range ids {
		require.NoError(t, bob.Ack(ctx, "tasks.run", id))
	}
	requireProgress(t, st, "tasks.run", pigeon.DefaultGroup, store.GroupState{Floor: 10})
}

// boundsCounter is a memory store that counts Bounds calls.
type boundsCounter struct {
	*memory.Store
	n atomic.Int64
}

func (b *boundsCounter) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	b.n.Add(1)
	return b.Store.Bounds(ctx, subject)
}

// TestPullCursorAsksNoBounds: a pull on a pubsub subject loads its cursor
// from the store, but raises the cursor's floor from what it reads, so it
// asks the store for no Bounds (a round trip of its own on the JetStream
// store) on top of the read.
func TestPullCursorAsksNoBounds(t *testing.T) {
	st := &boundsCounter{Store: memory.New(nil)}
	f := evictFixture(t, func(o *pigeon.Options) { o.Store = st })
	alice, bob := f.connect("alice-token", "chat.messages"), f.connect("bob-token", "chat.messages")
	for i := range 6 {
		_, err := alice.Publish(ctx, chat(i))
		require.NoError(t, err)
	}
	before := st.n.Load()
	for range 3 {
		require.Len(t, receiveIDs(t, bob, "chat.messages", 2), 2)
	}
	require.Zero(t, st.n.Load()-before, "Bounds calls of three pulls")
	requireProgress(t, st, "chat.messages", "cursor:"+transporttest.Bob, store.GroupState{Floor: 6})
}
