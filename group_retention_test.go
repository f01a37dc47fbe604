package pigeon_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
	"pigeon/transport/transporttest"
)

// retentionFixture is evictFixture with tasks.run and chat.messages
// keeping their messages for keep (0: for good), contracts that outlive
// the moves of the clock, and a memory store whose progress writes the
// engine's clock stamps. mutate runs last.
func retentionFixture(t *testing.T, keep time.Duration, mutate ...func(*pigeon.Options)) (*fixture, *memory.Store) {
	t.Helper()
	var st *memory.Store
	f := evictFixture(t, append([]func(*pigeon.Options){func(o *pigeon.Options) {
		o.ContractTTL, o.MaxContractTTL = 400*24*time.Hour, 400*24*time.Hour
		for i, s := range o.Catalog.Subjects {
			if s.Name == "tasks.run" || s.Name == "chat.messages" {
				o.Catalog.Subjects[i].Retention.MessagesMs = keep.Milliseconds()
			}
		}
		st = memory.New(&memory.Options{Now: o.Now})
		o.Store = st
	}}, mutate...)...)
	t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
	return f, st
}

// requireProgress asserts the stored progress of group on subject.
func requireProgress(t *testing.T, st store.Store, subject, group string, want store.GroupState) {
	t.Helper()
	got, err := st.LoadGroup(ctx, store.GroupKey{Subject: subject, Group: group})
	require.NoError(t, err)
	require.Equal(t, want, got, "stored progress of %s on %s", group, subject)
}

// consume subscribes s to tasks.run in group until the group has been
// handed want messages in all, then unsubscribes: the group leaves memory.
func consume(t *testing.T, f *fixture, s pigeon.Session, got *handled, group string, want int) {
	t.Helper()
	sub, err := s.Subscribe(ctx, "tasks.run", got.handler(group), pigeon.WithGroup(group))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(got.ids(group)) >= want }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	require.Len(t, got.ids(group), want)
	require.False(t, f.e.GroupLoaded("tasks.run", group))
}

// TestUnusedGroupsGoWithTheirMessages: on a subject that keeps messages
// an hour, the stored progress of a group unused for over an hour is
// deleted in the retention pass that trims the messages it handled, and
// audited. A group used within the hour, or held in memory however long
// ago it wrote, keeps its progress. A new subscriber of the deleted group
// gets what is retained — the messages published after the group was last
// used, the same ones its progress would have given it — and nothing it
// had handled.
func TestUnusedGroupsGoWithTheirMessages(t *testing.T) {
	f, st := retentionFixture(t, time.Hour)
	boss := f.connect("boss-token", "tasks.run")
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	got := newHandled()

	old := publishTasks(t, boss, 1, 3)
	consume(t, f, alice, got, "mailers", 3)
	consume(t, f, bob, got, "busy", 3)
	consume(t, f, bob, got, "recent", 3)
	release, err := f.e.HoldGroup(ctx, "tasks.run", "busy") // in use from now on, writing nothing
	require.NoError(t, err)

	f.clock.Advance(30 * time.Minute)
	newer := publishTasks(t, boss, 4, 4)
	consume(t, f, bob, got, "recent", 4)

	f.clock.Advance(31 * time.Minute) // the first three are over an hour old, the fourth is not
	f.e.EnforceRetention(ctx)
	first, _, err := st.Bounds(ctx, "tasks.run")
	require.NoError(t, err)
	require.Equal(t, uint64(4), first, "the messages of the first hour are trimmed")
	requireProgress(t, st, "tasks.run", "mailers", store.GroupState{})
	requireProgress(t, st, "tasks.run", "busy", store.GroupState{Floor: 3})
	requireProgress(t, st, "tasks.run", "recent", store.GroupState{Floor: 4})
	recs := auditOf(t, f.e, pigeon.EventRetentionGroups)
	require.Len(t, recs, 1)
	require.Equal(t, "tasks.run", recs[0].Subject)
	require.Equal(t, "1", recs[0].Ref, "how many groups went")
	require.Equal(t, string(pigeon.CodeOK), recs[0].Code)

	// Once let go, the group held all along goes at the next pass.
	release()
	f.e.EnforceRetention(ctx)
	requireProgress(t, st, "tasks.run", "busy", store.GroupState{})
	require.Len(t, auditOf(t, f.e, pigeon.EventRetentionGroups), 2)
	requireProgress(t, st, "tasks.run", "recent", store.GroupState{Floor: 4})

	latest := publishTasks(t, boss, 5, 5)
	consume(t, f, alice, got, "mailers", 5)
	require.ElementsMatch(t, append(append(old, newer...), latest...), got.ids("mailers"),
		"the group starts again at the first retained message, published after it was last used")
}

// auditOf returns e's audit records of type typ.
func auditOf(t *testing.T, e *pigeon.Engine, typ pigeon.Event) []pigeon.AuditRecord {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var out []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type == string(typ) {
			out = append(out, r)
		}
	}
	return out
}

// auditedCount sums the counts that the records of a retention event
// (typ) carry in their Ref.
func auditedCount(t *testing.T, e *pigeon.Engine, typ pigeon.Event) int {
	t.Helper()
	n := 0
	for _, r := range auditOf(t, e, typ) {
		k, err := strconv.Atoi(r.Ref)
		require.NoError(t, err)
		n += k
	}
	return n
}

// groupRetentionCase is one setting of Options.GroupRetention, how long a
// group then stays unused, and whether its stored progress goes.
type groupRetentionCase struct {
	name      string
	retention time.Duration
	idle      time.Duration
	deleted   bool
}

// groupRetentionCases are the edges of the GroupRetention rule: the
// default and a set retention (set), each just reached and just passed,
// and a negative one that keeps progress for good.
func groupRetentionCases(set time.Duration) []groupRetentionCase {
	return []groupRetentionCase{
		{"default, not yet", 0, pigeon.DefaultGroupRetention, false},
		{"default", 0, pigeon.DefaultGroupRetention + time.Millisecond, true},
		{"set, not yet", set, set, false},
		{"set", set, set + time.Millisecond, true},
		{"negative keeps for good", -1, 10 * 365 * 24 * time.Hour, false},
	}
}

// TestGroupRetention: on a subject that keeps its messages for good,
// Options.GroupRetention says how long the progress of an unused group
// stays (30 days by default; negative: for good). A group whose progress
// went starts again from the first message.
func TestGroupRetention(t *testing.T) {
	for _, tt := range groupRetentionCases(time.Hour) {
		t.Run(tt.name, func(t *testing.T) {
			f, st := retentionFixture(t, 0, func(o *pigeon.Options) { o.GroupRetention = tt.retention })
			boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")
			got := newHandled()
			ids := publishTasks(t, boss, 1, 3)
			consume(t, f, alice, got, "mailers", 3)

			f.clock.Advance(tt.idle)
			f.e.EnforceRetention(ctx)
			first, _, err := st.Bounds(ctx, "tasks.run")
			require.NoError(t, err)
			require.Equal(t, uint64(1), first, "the subject keeps its messages")
			want, again := store.GroupState{Floor: 3}, 0
			if tt.deleted {
				want, again = store.GroupState{}, 3
			}
			requireProgress(t, st, "tasks.run", "mailers", want)
			require.Len(t, auditOf(t, f.e, pigeon.EventRetentionGroups), again/3)

			boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
			ids = append(ids, publishTasks(t, boss, 4, 4)...)
			consume(t, f, bob, got, "mailers", 4+again)
			if tt.deleted {
				require.ElementsMatch(t, append(ids, ids[:3]...), got.ids("mailers"), "the group starts again from the first message")
			} else {
				require.ElementsMatch(t, ids, got.ids("mailers"), "the group goes on where it was")
			}
		})
	}
}

// TestPullCursorsFollowGroupRetention: a principal's pull cursor on a
// pubsub subject is kept as a group is.
func TestPullCursorsFollowGroupRetention(t *testing.T) {
	f, st := retentionFixture(t, time.Minute)
	alice, bob := f.connect("alice-token", "chat.messages"), f.connect("bob-token", "chat.messages")
	for i := range 3 {
		_, err := alice.Publish(ctx, chat(i))
		require.NoError(t, err)
	}
	msgs, err := bob.Receive(ctx, "chat.messages", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	cursor := "cursor:" + transporttest.Bob
	requireProgress(t, st, "chat.messages", cursor, store.GroupState{Floor: 3})

	f.clock.Advance(time.Minute + time.Millisecond)
	r, err := alice.Publish(ctx, chat(3))
	require.NoError(t, err)
	f.e.EnforceRetention(ctx)
	requireProgress(t, st, "chat.messages", cursor, store.GroupState{})
	msgs, err = bob.Receive(ctx, "chat.messages", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, r.Message.ID, msgs[0].ID, "the cursor goes on from the first retained message")
	msgs, err = bob.Receive(ctx, "chat.messages", 10)
	require.NoError(t, err)
	require.Empty(t, msgs)
}

// gatedPruner is a memory store whose PruneGroups stops, once keep let
// group go and before the group is deleted, until resume is closed.
type gatedPruner struct {
	*memory.Store
	group           string
	stopped, resume chan struct{}
}

func (g *gatedPruner) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(string) bool) (int, error) {
	return g.Store.PruneGroups(ctx, subject, t, func(name string) bool {
		if keep(name) {
			return true
		}
		if name == g.group {
			close(g.stopped)
			<-g.resume
		}
		return false
	})
}

// TestGroupLoadWaitsForPrune: a group whose stored progress is being
// deleted is loaded only once the deletion is done, so it never runs on
// progress the store no longer has: here, after the deletion, it starts
// again from the first message rather than after those it had done.
func TestGroupLoadWaitsForPrune(t *testing.T) {
	gp := &gatedPruner{group: "mailers", stopped: make(chan struct{}), resume: make(chan struct{})}
	f, _ := retentionFixture(t, 0, func(o *pigeon.Options) {
		o.GroupRetention = time.Hour
		gp.Store = o.Store.(*memory.Store)
		o.Store = gp
	})
	boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")
	got := newHandled()
	ids := publishTasks(t, boss, 1, 3)
	consume(t, f, alice, got, "mailers", 3)
	f.clock.Advance(2 * time.Hour)

	resume := sync.OnceFunc(func() { close(gp.resume) })
	t.Cleanup(resume) // before Shutdown, should the test fail early
	pruned := make(chan struct{})
	go func() {
		defer close(pruned)
		f.e.EnforceRetention(ctx)
	}()
	select {
	case <-gp.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the retention pass did not delete the group's progress")
	}
	type hold struct {
		release func()
		err     error
	}
	held := make(chan hold, 1)
	go func() {
		release, err := f.e.HoldGroup(ctx, "tasks.run", "mailers")
		held <- hold{release, err}
	}()
	require.Never(t, func() bool { return len(held) > 0 }, 50*time.Millisecond, time.Millisecond,
		"the group is not loaded while its progress is being deleted")
	resume()
	<-pruned
	h := <-held
	require.NoError(t, h.err)
	defer h.release()

	// The group held in memory all along is the one a subscriber joins.
	bob := f.connect("bob-token", "tasks.run")
	sub, err := bob.Subscribe(ctx, "tasks.run", got.handler("mailers"), pigeon.WithGroup("mailers"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(got.ids("mailers")) >= 6 }, 30*time.Second, time.Millisecond,
		"the group starts again from the first message")
	require.NoError(t, sub.Unsubscribe(ctx))
	require.ElementsMatch(t, append(ids, ids...), got.ids("mailers"))
}

// TestPruningUnderChurn: retention passes run, the clock moving a
// millisecond each, while subscribers join and leave groups of tasks.run,
// pull receivers take and ack its tasks, and pull cursors read
// chat.messages, both subjects keeping messages 20 ms, on each store.
// Progress of groups nobody uses is deleted all along, yet no group is
// handed a task twice (the clock stays within the ack wait, so no lease
// runs out) and no cursor goes back: the progress of a group in use is
// never lost, and a group whose progress went starts where it would have
// gone on.
func TestPruningUnderChurn(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T, now func() time.Time) store.Store
	}{
		{"memory", func(t *testing.T, now func() time.Time) store.Store { return memory.New(&memory.Options{Now: now}) }},
		{"wal", func(t *testing.T, now func() time.Time) store.Store {
			st, err := wal.Open(t.TempDir(), &wal.Options{Sync: wal.SyncNone, Now: now})
			require.NoError(t, err)
			return st
		}},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			var st store.Store
			f, _ := retentionFixture(t, 20*time.Millisecond, func(o *pigeon.Options) {
				st = sc.open(t, o.Now)
				o.Store = st
			})
			t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
			pruningUnderChurn(t, f)
		})
	}
}

func pruningUnderChurn(t *testing.T, f *fixture) {
	boss := f.connect("boss-token", "tasks.run")
	alice, bob := f.connect("alice-token", "tasks.run", "chat.messages"), f.connect("bob-token", "tasks.run", "chat.messages")
	got := newHandled()
	// Groups that go idle at once, for the first passes to delete.
	publishTasks(t, boss, 0, 0)
	for i := range 3 {
		consume(t, f, alice, got, "abandoned-"+strconv.Itoa(i), 1)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	loop := func(fn func(i int) error) {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := fn(i); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	loop(func(i int) error {
		time.Sleep(100 * time.Microsecond)
		_, err := boss.Publish(ctx, task(i))
		return err
	})
	loop(func(i int) error {
		time.Sleep(100 * time.Microsecond)
		_, err := alice.Publish(ctx, chat(i))
		return err
	})
	for w, s := range []pigeon.Session{alice, bob} {
		loop(func(i int) error { // members come and go, groups are left with none for a while
			g := "g" + strconv.Itoa((4*w+i/20)%8)
			sub, err := s.Subscribe(ctx, "tasks.run", got.handler(g), pigeon.WithGroup(g))
			if err != nil {
				return err
			}
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			return sub.Unsubscribe(ctx)
		})
		loop(func(int) error { // a pull receiver of the default group
			msgs, err := s.Receive(ctx, "tasks.run", 3)
			for _, m := range msgs {
				got.add(pigeon.DefaultGroup, m.ID)
				if err := s.Ack(ctx, "tasks.run", m.ID); err != nil && pigeon.ErrorCode(err) != pigeon.CodeMessageNotFound {
					return err // not found: trimmed since it was received
				}
			}
			return err
		})
		var last uint64
		loop(func(i int) error { // a pull cursor, idle now and then
			if i%40 == 39 {
				time.Sleep(6 * time.Millisecond)
			}
			msgs, err := s.Receive(ctx, "chat.messages", 3)
			for _, m := range msgs {
				if m.Sequence <= last {
					return fmt.Errorf("a cursor went back from %d to %d", last, m.Sequence)
				}
				last = m.Sequence
			}
			return err
		})
	}
	pruned := func() int { return auditedCount(t, f.e, pigeon.EventRetentionGroups) }
	// 300 ms of the clock, and up to 900 (within tasks.run's one-second
	// ack wait) until a churned group went idle long enough to be pruned:
	// on a loaded machine the churning goroutines get less of each
	// millisecond.
	for ms := 1; ms <= 900; ms++ {
		f.clock.Advance(time.Millisecond)
		f.e.EnforceRetention(ctx)
		time.Sleep(200 * time.Microsecond)
		if ms >= 300 && ms%50 == 0 && pruned() > 3 {
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, g := range []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", pigeon.DefaultGroup} {
		ids := got.ids(g)
		require.NotEmpty(t, ids, "group %s was handed tasks", g)
		seen := map[string]bool{}
		for _, id := range ids {
			require.False(t, seen[id], "group %s was handed %s twice", g, id)
			seen[id] = true
		}
	}
	require.Greater(t, pruned(), 3, "the progress of unused groups and cursors went all along")
}
