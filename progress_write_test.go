package pigeon_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// progressFailingStore is a memory store whose failAt-th write of a
// consumer group's progress (MarkDone, MarkDoneBatch; counted from 1)
// fails with err, as a full disk or a store without quorum fails it; the
// writes before and after it work.
type progressFailingStore struct {
	*memory.Store
	failAt int64
	err    error
	writes atomic.Int64
}

func (s *progressFailingStore) fails() bool { return s.writes.Add(1) == s.failAt }

// failed reports whether the failing write was met.
func (s *progressFailingStore) failed() bool { return s.writes.Load() >= s.failAt }

func (s *progressFailingStore) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if s.fails() {
		return s.err
	}
	return s.Store.MarkDone(ctx, key, seq)
}

func (s *progressFailingStore) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	if s.fails() {
		return s.err
	}
	return s.Store.MarkDoneBatch(ctx, key, seqs)
}

// oneAtATime is a store without batch progress writes
// (store.BatchProgress): the engine records messages done one at a time,
// so a failure can come after some were recorded.
type oneAtATime struct{ store.Store }

// LowerAttempt is the store's own: oneAtATime hides batch writes only.
func (s oneAtATime) LowerAttempt(ctx context.Context, key store.GroupKey, seq uint64, from, to int) error {
	return s.Store.(store.AttemptLowerer).LowerAttempt(ctx, key, seq, from, to)
}

func newProgressFailingStore(t *testing.T, failAt int64, err error) *progressFailingStore {
	t.Helper()
	st := &progressFailingStore{Store: memory.New(nil), failAt: failAt, err: err}
	t.Cleanup(func() { _ = st.Close(ctx) })
	return st
}

// groupLag is the Lag of each group of subject, by group, in e's Stats.
func groupLag(t *testing.T, e *pigeon.Engine, subject string) map[string]uint64 {
	t.Helper()
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, g := range st.Groups {
		if g.Subject == subject {
			out[g.Group] = g.Lag
		}
	}
	return out
}

// runs records, per message id, the attempts a handler was handed.
type runs struct {
	mu sync.Mutex
	n  map[string][]int
}

func (r *runs) handler(_ context.Context, d *pigeon.Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string][]int{}
	}
	r.n[d.Message.ID] = append(r.n[d.Message.ID], d.Attempt)
	return nil
}

func (r *runs) of(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.n[id]...)
}

// TestPushAckTheStoreFailsToRecordIsDeliveredAgain: a push subscription's
// acknowledgement whose progress write fails (a full disk) leaves nothing
// held: the message comes back at once and is handed over again, its
// attempt counted (the handler ran, its answer was not recorded, as after
// a crash between the two), then settled once the write works; the
// subscription's window is whole (the next message is handed over too)
// and the group has no lag. Before, the message's lease stayed busy for
// as long as the subscription lived: never handed over again, never
// settled (on this clock, which never moves, nothing ran out either).
func TestPushAckTheStoreFailsToRecordIsDeliveredAgain(t *testing.T) {
	st := newProgressFailingStore(t, 1, store.ErrFull)
	f := evictFixture(t, func(o *pigeon.Options) { o.Store = st })
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	var r runs
	sub, err := alice.Subscribe(ctx, "tasks.run", r.handler)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe(ctx)) }()

	ids := publishTasks(t, boss, 1, 1)
	require.Eventually(t, func() bool { return len(r.of(ids[0])) == 2 }, 10*time.Second, time.Millisecond,
		"the message whose acknowledgement was not recorded is handed over again")
	require.Eventually(t, func() bool { return groupLag(t, f.e, "tasks.run")[pigeon.DefaultGroup] == 0 }, 10*time.Second, time.Millisecond,
		"the second acknowledgement settles it")
	require.True(t, st.failed())
	require.Equal(t, []int{1, 2}, r.of(ids[0]), "handed over again as its next attempt, then settled")

	// The window (one in flight) is whole: the next message is handed over.
	next := publishTasks(t, boss, 2, 2)
	require.Eventually(t, func() bool { return len(r.of(next[0])) == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return groupLag(t, f.e, "tasks.run")[pigeon.DefaultGroup] == 0 }, 10*time.Second, time.Millisecond)
	require.Equal(t, []int{1, 2}, r.of(ids[0]), "a settled message is not handed over again")
	require.NoError(t, sub.Err())
}

// TestPushAckTheStoreFailsToRecordInAClusterIsSettled: in a cluster-shared
// group the acknowledgement settles the cluster lease before the progress
// write; when that write fails, the message is done for every node all the
// same. Its lease here is let go at once, and its next lease finds it
// settled and writes the progress again: the handler ran once, and the
// group has no lag. Before, the lease stayed busy, extended by the
// cluster's extender, then found lost: neither settled in the group's
// progress nor handed over again while the subscription lived.
func TestPushAckTheStoreFailsToRecordInAClusterIsSettled(t *testing.T) {
	st := newProgressFailingStore(t, 1, store.ErrFull)
	h := &hub{leases: map[string]*hubLease{}}
	o := transporttest.Options()
	o.Store, o.Cluster = st, &extendingNode{hubNode: h.node()}
	e := startEngine(t, o)
	boss := dupConnect(t, e, "boss-token", "jobs.batch")
	crew := dupConnect(t, e, "crew-token", "jobs.batch")
	var r runs
	sub, err := crew.Subscribe(ctx, "jobs.batch", r.handler)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe(ctx)) }()

	res, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.batch", Intent: "run", Data: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return groupLag(t, e, "jobs.batch")[pigeon.DefaultGroup] == 0 }, 10*time.Second, time.Millisecond,
		"the message settled in the cluster is recorded done in the group's progress")
	require.True(t, st.failed())
	require.Equal(t, []int{1}, r.of(res.Message.ID), "handed over once: the cluster holds it settled")
	require.NoError(t, sub.Err())
}

// TestSettledReceiveTheStoreFailsToRecordGoesBack: a receive that settles
// what it hands out (ReceiveSettled, the HTTP pull) whose progress write
// fails hands out nothing it left not done: the call fails with the
// store's code, and the message goes back to the group at once, its
// attempt given back; another consumer of the group receives it as its
// first attempt. When the store recorded part of the batch before it
// failed (a store without batch writes), that part is done and is handed
// out. Before, the call failed and the messages stayed leased to its
// caller, who was never handed them, until their ack wait (on this clock,
// never), and what was recorded done was never handed to anyone.
func TestSettledReceiveTheStoreFailsToRecordGoesBack(t *testing.T) {
	tests := []struct {
		name     string
		failAt   int64
		batch    bool
		got, err bool // what the settled receive of both tasks returns: the first, an error
	}{
		{name: "batch write fails", failAt: 1, batch: true, err: true},
		{name: "second of single writes fails", failAt: 2, got: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newProgressFailingStore(t, tt.failAt, store.ErrFull)
			f := evictFixture(t, func(o *pigeon.Options) {
				o.Store = st
				if !tt.batch {
					o.Store = oneAtATime{st}
				}
			})
			boss := f.connect("boss-token", "tasks.run")
			alice := f.connect("alice-token", "tasks.run")
			bob := f.connect("bob-token", "tasks.run")
			ids := publishTasks(t, boss, 1, 2)

			got, err := f.e.ReceiveSettled(ctx, callerOf(alice), "tasks.run", 2)
			require.True(t, st.failed())
			back := ids
			if tt.err {
				requireCode(t, err, pigeon.CodeStoreFull)
				require.Empty(t, got)
			} else {
				require.NoError(t, err)
				require.Len(t, got, 1, "what the store recorded done is handed out")
				require.Equal(t, ids[0], got[0].ID)
				back = ids[1:]
			}
			msgs, attempts, err := f.e.ReceiveAttempts(ctx, callerOf(bob), "tasks.run", 2)
			require.NoError(t, err)
			require.Len(t, msgs, len(back), "what was not recorded went back to the group at once")
			for i, m := range msgs {
				require.Equal(t, back[i], m.ID)
				require.Equal(t, 1, attempts[i], "never handed out: its attempt was given back")
			}
		})
	}
}

// TestSkipTheStoreFailsToRecordIsNotHeld: a message a push subscription's
// selection skips is leased, then recorded done for its group; when that
// write fails (a store without quorum for a moment: the subscription goes
// on), the lease taken for it ends at once, its attempt given back, and
// the next lease records it skipped. Before, the lease stayed held, with
// an attempt spent on a message nobody was handed, until its ack wait (on
// this clock, never): the group kept it as lag.
func TestSkipTheStoreFailsToRecordIsNotHeld(t *testing.T) {
	st := newProgressFailingStore(t, 1, store.ErrNoQuorum)
	f := evictFixture(t, func(o *pigeon.Options) { o.Store = st })
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	var r runs
	sub, err := alice.Subscribe(ctx, "tasks.run", r.handler, pigeon.WithSelector("/kind=b"))
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Unsubscribe(ctx)) }()

	var ids []string
	for _, kind := range []string{"a", "b"} {
		res, err := boss.Publish(ctx, &pigeon.Message{Type: "task", Subject: "tasks.run", Intent: "run", Data: json.RawMessage(`{"kind":"` + kind + `"}`)})
		require.NoError(t, err)
		ids = append(ids, res.Message.ID)
	}
	require.Eventually(t, func() bool { return len(r.of(ids[1])) == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		for g, lag := range groupLag(t, f.e, "tasks.run") {
			if strings.HasPrefix(g, pigeon.DefaultGroup+"|") && lag == 0 {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the skipped message is recorded done once the store works")
	require.True(t, st.failed())
	require.Empty(t, r.of(ids[0]))
	require.NoError(t, sub.Err())
}

// TestPullAckTheStoreFailsToRecordCanBeRetried: a pull Ack whose progress
// write fails is refused with the store's code, and the lease stays the
// consumer's until its ack wait, so that the consumer, told, acks again:
// the retry settles the message.
func TestPullAckTheStoreFailsToRecordCanBeRetried(t *testing.T) {
	st := newProgressFailingStore(t, 1, store.ErrFull)
	f := evictFixture(t, func(o *pigeon.Options) { o.Store = st })
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	ids := publishTasks(t, boss, 1, 1)
	got, attempts, err := f.e.ReceiveAttempts(ctx, callerOf(alice), "tasks.run", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	requireCode(t, f.e.AckAttempt(ctx, callerOf(alice), "tasks.run", ids[0], got[0].Sequence, attempts[0]), pigeon.CodeStoreFull)
	require.NoError(t, f.e.AckAttempt(ctx, callerOf(alice), "tasks.run", ids[0], got[0].Sequence, attempts[0]))
	require.Equal(t, uint64(0), groupLag(t, f.e, "tasks.run")[pigeon.DefaultGroup])
}
