package pigeon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// storedGroups counts the groups whose progress st keeps for subject, as
// the store lists them.
func storedGroups(t *testing.T, st store.GroupLister, subject string) int {
	t.Helper()
	gs, err := st.ListGroups(ctx, subject, 0)
	require.NoError(t, err)
	return len(gs)
}

// cycleGroup subscribes alice to tasks.run in group, waits until the
// group has done its one task, and unsubscribes: the group leaves memory
// (MaxGroupsPerSubject counts it no more), its progress stays in the store.
func cycleGroup(t *testing.T, alice pigeon.Session, group string) error {
	t.Helper()
	got := newHandled()
	sub, err := alice.Subscribe(ctx, "tasks.run", got.handler(group), pigeon.WithGroup(group))
	if err != nil {
		return err
	}
	require.Eventually(t, func() bool { return got.count(group) == 1 }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	return nil
}

// Groups were bounded in memory, not in number: a group that leaves memory
// keeps its progress in the store until retention prunes it (30 days by
// default), so a subscriber cycling through new group names, each done
// with its work and gone, stayed within MaxGroupsPerSubject while the
// store grew by a group a subscription (here 40 with a cap of 2). Now the
// store keeps at most MaxStoredGroupsPerSubject groups of a subject: a new
// name beyond it is refused TOO_MANY_GROUPS (audited subscribe.denied),
// and the groups with progress go on.
func TestStoredGroupsAreCapped(t *testing.T) {
	st := memory.New(nil)
	f := evictFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.MaxGroupsPerSubject = 2
		o.MaxStoredGroupsPerSubject = 5
	})
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	publishTasks(t, boss, 1, 1)

	const names = 40
	refused := 0
	for i := range names {
		err := cycleGroup(t, alice, "g"+strconv.Itoa(i))
		if err != nil {
			requireCode(t, err, pigeon.CodeTooManyGroups)
			refused++
		}
		require.LessOrEqual(t, storedGroups(t, st, "tasks.run"), 5, "after %d names", i+1)
	}
	require.Equal(t, 5, storedGroups(t, st, "tasks.run"))
	require.Equal(t, names-5, refused)

	// The groups kept go on, each with what it has not done.
	publishTasks(t, boss, 2, 2)
	for i := range 5 {
		require.NoError(t, cycleGroup(t, alice, "g"+strconv.Itoa(i)))
	}
	require.Equal(t, 5, storedGroups(t, st, "tasks.run"))

	f.clock.Advance(time.Second) // the run of refusals is written
	require.Equal(t, names-5, refusalCount(t, f.e, pigeon.EventSubscribeDenied, pigeon.CodeTooManyGroups))
}

// TestStoredGroupCapDefault: the cap is DefaultMaxStoredGroupsPerSubject
// when the option is zero; a negative option lifts it.
func TestStoredGroupCapDefault(t *testing.T) {
	require.Equal(t, 10000, pigeon.DefaultMaxStoredGroupsPerSubject)
	require.GreaterOrEqual(t, pigeon.DefaultMaxStoredGroupsPerSubject, pigeon.DefaultMaxGroupsPerSubject)

	st := memory.New(nil)
	f := evictFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.MaxGroupsPerSubject = 1
		o.MaxStoredGroupsPerSubject = -1
	})
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	publishTasks(t, boss, 1, 1)
	for i := range 12 {
		require.NoError(t, cycleGroup(t, alice, "g"+strconv.Itoa(i)))
	}
	require.Equal(t, 12, storedGroups(t, st, "tasks.run"))
}
