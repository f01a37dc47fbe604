package pigeon_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
	"pigeon/transport/transporttest"
)

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	events  map[pigeon.Event]int
	stages  map[pigeon.Stage]int
	commits map[pigeon.CommitLog]int
	notes   map[pigeon.Note][]string
}

func newRecorder() *recorder {
	return &recorder{events: map[pigeon.Event]int{}, stages: map[pigeon.Stage]int{}, commits: map[pigeon.CommitLog]int{}, notes: map[pigeon.Note][]string{}}
}

func (r *recorder) Audited(rec pigeon.AuditRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[pigeon.Event(rec.Type)]++
}

func (r *recorder) Took(s pigeon.Stage, _ string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d >= 0 {
		r.stages[s]++
	}
}

func (r *recorder) Committed(l pigeon.CommitLog, n int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commits[l] += n
}

func (r *recorder) Noted(n pigeon.Note, label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes[n] = append(r.notes[n], label)
}

func (r *recorder) snapshot(f func(*recorder) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f(r)
}

// TestObserverSeesTheEngine: decisions, deliveries, latencies, store
// writes, redeliveries and refused credentials reach the Observer, and
// Observers hands each call to all of them.
func TestObserverSeesTheEngine(t *testing.T) {
	a, b := newRecorder(), newRecorder()
	f := newFixture(t, func(o *pigeon.Options) {
		o.Observer = pigeon.Observers(a, nil, b)
		o.Now = time.Now // real time: the redelivery falls due
	})
	orders := f.connect("orders-token", "notifications.send")
	_, err := orders.Publish(ctx, demo.Notification("n-1"))
	require.NoError(t, err)
	bad := demo.Notification("n-2")
	bad.Type = ""
	_, err = orders.Publish(ctx, bad)
	requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	_, err = f.e.Authenticate(ctx, "nobody")
	requireCode(t, err, pigeon.CodeUnauthenticated)

	var mu sync.Mutex
	calls := 0
	sub, err := f.e.Handle(ctx, "notifier-token", "notifications.send", func(context.Context, *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe(context.Background()) }()
	require.Eventually(t, func() bool {
		return a.snapshot(func(r *recorder) bool {
			return r.stages[pigeon.StageDeliver] >= 2 && len(r.notes[pigeon.NoteRedelivery]) >= 1
		})
	}, 30*time.Second, 5*time.Millisecond)

	for _, r := range []*recorder{a, b} {
		r.snapshot(func(r *recorder) bool {
			require.Equal(t, 1, r.events[pigeon.EventPublishAccepted])
			require.Equal(t, 1, r.events[pigeon.EventPublishDenied])
			require.Equal(t, 2, r.stages[pigeon.StagePublish])
			require.Equal(t, 2, r.stages[pigeon.StageNegotiate], "the publisher's and the handler's contracts")
			require.Equal(t, 1, r.commits[pigeon.CommitMessages])
			require.Equal(t, []string{"token"}, r.notes[pigeon.NoteAuthFailure])
			require.Equal(t, "notifications.send", r.notes[pigeon.NoteRedelivery][0])
			return true
		})
	}
	require.Nil(t, pigeon.Observers(nil, nil))
	require.Same(t, a, pigeon.Observers(nil, a))
}

func TestStatsAndLastVerify(t *testing.T) {
	f := newFixture(t)
	st, err := f.e.Stats(ctx)
	require.NoError(t, err)
	require.True(t, st.LastVerify.Time.IsZero(), "no verification yet")
	orders := f.connect("orders-token", "notifications.send")
	_, err = orders.Publish(ctx, demo.Notification("n-1"))
	require.NoError(t, err)
	n, err := f.e.VerifyAudit(ctx)
	require.NoError(t, err)
	st, err = f.e.Stats(ctx)
	require.NoError(t, err)
	require.True(t, st.LastVerify.OK)
	require.Equal(t, n, st.LastVerify.Verified)
	require.Equal(t, 1, st.Contracts)
	require.GreaterOrEqual(t, st.AuditRecords, n)
}

// TestStatsSubjects: Stats says what each subject of the catalog holds,
// with its bounds, in name order: its retained messages and sequences
// and, for a subject with retention.maxBytes, their envelopes' bytes as
// the store counts them.
func TestStatsSubjects(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	f := newFixture(t, func(o *pigeon.Options) {
		o.Store = st
		for i := range o.Catalog.Subjects {
			if o.Catalog.Subjects[i].Name == "notifications.send" {
				o.Catalog.Subjects[i].Retention.MaxMessages = 100
				o.Catalog.Subjects[i].Retention.MaxBytes = 1 << 20
			}
		}
	})
	orders := f.connect("orders-token", "notifications.send")
	for _, key := range []string{"n-1", "n-2", "n-3"} {
		_, err := orders.Publish(ctx, demo.Notification(key))
		require.NoError(t, err)
	}
	held, err := st.Bytes(ctx, "notifications.send")
	require.NoError(t, err)
	require.Positive(t, held)
	s, err := f.e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, []pigeon.SubjectStats{
		{Subject: "notifications.send", Messages: 3, FirstSeq: 1, LastSeq: 3, Bytes: held, MaxMessages: 100, MaxBytes: 1 << 20},
		{Subject: "payments.authorize"},
	}, s.Subjects)
}

// TestLiveContracts: the contracts in force, newest first, bounded, with
// the total; revoked and expired ones are gone.
func TestLiveContracts(t *testing.T) {
	f := newFixture(t)
	orders, err := f.e.Authenticate(ctx, "orders-token")
	require.NoError(t, err)
	negotiate := func(p *pigeon.Principal, ttl time.Duration, subjects ...string) string {
		k, err := f.e.Negotiate(ctx, p, "uk", subjects, ttl)
		require.NoError(t, err)
		f.clock.Advance(time.Second)
		return k.ID()
	}
	short := negotiate(orders, 5*time.Second, "notifications.send")
	revoked := negotiate(orders, time.Hour, "notifications.send")
	first := negotiate(orders, time.Hour, "notifications.send")
	notifier, err := f.e.Authenticate(ctx, "notifier-token")
	require.NoError(t, err)
	second := negotiate(notifier, time.Hour, "notifications.send")
	require.NoError(t, f.e.RevokeContract(ctx, orders, revoked))

	list, total, err := f.e.LiveContracts(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 3, total)
	require.Equal(t, []string{second, first, short}, []string{list[0].ID, list[1].ID, list[2].ID})
	require.Equal(t, notifier.ID, list[0].Principal)
	require.Equal(t, pigeon.AuthToken, list[0].Auth)
	require.Equal(t, []string{"notifications.send"}, list[0].Subjects)
	require.True(t, list[0].ExpiresAt.After(list[0].IssuedAt))

	f.clock.Advance(5 * time.Second) // short expires
	list, total, err = f.e.LiveContracts(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 2, total)
	require.Len(t, list, 1)
	require.Equal(t, second, list[0].ID)
	st, err := f.e.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Contracts)
}

// TestStatsListsGroupsInTheStoreOnly: a work-queue group whose only
// subscriber left keeps its lag in Stats, from its stored progress, so a
// lag alert still sees it; a group in memory (and in the store) is listed
// once, from memory, with its leases.
func TestStatsListsGroupsInTheStoreOnly(t *testing.T) {
	f := evictFixture(t)
	boss := f.connect("boss-token", "tasks.run")
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	got := newHandled()
	publishTasks(t, boss, 1, 2)
	sub, err := alice.Subscribe(ctx, "tasks.run", got.handler("alice"), pigeon.WithGroup("mailers"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return got.count("alice") == 2 }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	require.False(t, f.e.GroupLoaded("tasks.run", "mailers"), "the idle group left memory")
	publishTasks(t, boss, 3, 5)

	groups := func() []pigeon.GroupStats {
		t.Helper()
		st, err := f.e.Stats(ctx)
		require.NoError(t, err)
		return st.Groups
	}
	mailers := pigeon.GroupStats{Subject: "tasks.run", Group: "mailers", Lag: 3}
	require.Equal(t, []pigeon.GroupStats{mailers}, groups(), "five published, two acknowledged, nobody left")

	msgs, err := bob.Receive(ctx, "tasks.run", 1) // the default group, in memory with its lease and in the store with its attempt
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.True(t, f.e.GroupLoaded("tasks.run", pigeon.DefaultGroup))
	release, err := f.e.HoldGroup(ctx, "tasks.run", "mailers")
	require.NoError(t, err)
	defer release()
	require.Equal(t, []pigeon.GroupStats{
		{Subject: "tasks.run", Group: pigeon.DefaultGroup, Lag: 5, InFlight: 1},
		mailers,
	}, groups(), "each group once, by name")
}

// BenchmarkStatsStoredGroups: Stats over n groups kept only in the store
// (every consumer gone), on the memory and WAL stores: the cost of one
// scrape of pigeon_consumer_lag or one console refresh.
func BenchmarkStatsStoredGroups(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) store.Store
	}{
		{"memory", func(*testing.B) store.Store { return memory.New(nil) }},
		{"wal", func(b *testing.B) store.Store {
			st, err := wal.Open(b.TempDir(), &wal.Options{Sync: wal.SyncNone})
			require.NoError(b, err)
			return st
		}},
	}
	for _, s := range stores {
		for _, n := range []int{1000, 10000} {
			b.Run(s.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				st := s.open(b)
				opts := transporttest.Options()
				opts.Store = st
				e, err := pigeon.New(ctx, opts)
				require.NoError(b, err)
				b.Cleanup(func() {
					require.NoError(b, e.Shutdown(ctx))
					require.NoError(b, st.Close(ctx))
				})
				for i := range n {
					key := store.GroupKey{Subject: "chat.messages", Group: "g" + strconv.Itoa(i)}
					require.NoError(b, st.MarkDone(ctx, key, 2)) // 1 not done: a floor of 0 and one in Done
				}
				b.ReportAllocs()
				for b.Loop() {
					stats, err := e.Stats(ctx)
					if err != nil || len(stats.Groups) != n {
						b.Fatalf("Stats: %d groups, %v", len(stats.Groups), err)
					}
				}
			})
		}
	}
}
