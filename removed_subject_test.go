package pigeon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// TestGroupsOfARemovedSubject: once a subject leaves the catalog (the
// broker starts again on a policy without it, over the same store), Stats
// still lists the stored groups of it, marked NotInCatalog, beside those
// of the catalog's subjects; and retention deletes their progress once
// unused for Options.GroupRetention (the subject's own message retention
// is gone with its policy), negative keeping it for good.
func TestGroupsOfARemovedSubject(t *testing.T) {
	for _, tt := range groupRetentionCases(2 * time.Hour) {
		t.Run(tt.name, func(t *testing.T) {
			// tasks.run keeps its messages an hour while in the catalog.
			f, st := retentionFixture(t, time.Hour)
			boss, alice := f.connect("boss-token", "tasks.run"), f.connect("alice-token", "tasks.run")
			publishTasks(t, boss, 1, 3)
			consume(t, f, alice, newHandled(), "mailers", 3)
			publishTasks(t, boss, 4, 5)
			require.NoError(t, f.e.Shutdown(ctx))

			next := newFixture(t, func(o *pigeon.Options) {
				base := transporttest.Options() // without tasks.run
				o.Catalog, o.Authenticator = base.Catalog, base.Authenticator
				o.Store, o.Now, o.GroupRetention = st, f.clock.Now, tt.retention
			})
			for _, p := range next.e.Subjects() {
				require.NotEqual(t, "tasks.run", p.Name, "tasks.run left the catalog")
			}
			require.NoError(t, st.MarkDone(ctx, store.GroupKey{Subject: "chat.messages", Group: "readers"}, 1))
			readers := pigeon.GroupStats{Subject: "chat.messages", Group: "readers"}
			mailers := pigeon.GroupStats{Subject: "tasks.run", Group: "mailers", Lag: 2, NotInCatalog: true}
			groups := func() []pigeon.GroupStats {
				t.Helper()
				s, err := next.e.Stats(ctx)
				require.NoError(t, err)
				return s.Groups
			}
			require.Equal(t, []pigeon.GroupStats{readers, mailers}, groups(), "by subject, the removed one marked")

			f.clock.Advance(tt.idle)
			next.e.EnforceRetention(ctx)
			if !tt.deleted {
				requireProgress(t, st, "tasks.run", "mailers", store.GroupState{Floor: 3})
				require.Equal(t, []pigeon.GroupStats{readers, mailers}, groups())
				require.Empty(t, auditOf(t, next.e, pigeon.EventRetentionGroups))
				return
			}
			requireProgress(t, st, "tasks.run", "mailers", store.GroupState{})
			require.Empty(t, groups(), "the catalog subject's group went too, unused as long")
			recs := auditOf(t, next.e, pigeon.EventRetentionGroups)
			require.Len(t, recs, 2)
			require.ElementsMatch(t, []string{"chat.messages", "tasks.run"}, []string{recs[0].Subject, recs[1].Subject})
			for _, r := range recs {
				require.Equal(t, "1", r.Ref, "how many groups went")
			}
		})
	}
}

// TestStatsBudgetGoesToTheCatalogFirst: the MaxStatsGroups stored groups
// Stats lists are those of the catalog's subjects first, so the groups of
// a removed subject, however many and whatever its name, hide none of a
// subject in use; they fill what is left of the budget.
func TestStatsBudgetGoesToTheCatalogFirst(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
	f := newFixture(t, func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog, o.Authenticator, o.Store = base.Catalog, base.Authenticator, st
	})
	for i := range pigeon.MaxStatsGroups {
		// "a.removed" sorts before every subject of the catalog.
		require.NoError(t, st.MarkDone(ctx, store.GroupKey{Subject: "a.removed", Group: "g" + strconv.Itoa(i)}, 1))
	}
	require.NoError(t, st.MarkDone(ctx, store.GroupKey{Subject: "chat.messages", Group: "readers"}, 1))
	s, err := f.e.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, s.Groups, pigeon.MaxStatsGroups)
	require.Equal(t, pigeon.GroupStats{Subject: "chat.messages", Group: "readers"}, s.Groups[len(s.Groups)-1], "the catalog's group, last by subject")
	for _, g := range s.Groups[:len(s.Groups)-1] {
		require.Equal(t, "a.removed", g.Subject)
		require.True(t, g.NotInCatalog)
	}
}
