package programs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/programs"
	"pigeon/store/memory"
)

// TestListPageAfterChanges: ListPage finds a page by the names it keeps in
// order (a binary search, not a scan of every program), and is told of
// every name added and removed: pages walked after the first (which put
// the names in order) list exactly what List lists once programs are
// removed, deployed under a name that sorts between two others, and
// refused at their first deploy (the name taken for the deploy and let go
// again), and on a Manager started again on the same store (the names
// restored).
func TestListPageAfterChanges(t *testing.T) {
	ctx := context.Background()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	walk := func(mg *programs.Manager) (names []string) {
		after := ""
		for range 20 {
			page, next, err := mg.ListPage(ctx, after, 2, nil)
			require.NoError(t, err)
			for _, in := range page {
				names = append(names, in.Name)
			}
			if next == "" {
				return names
			}
			after = next
		}
		t.Fatal("the pages do not end")
		return nil
	}
	listed := func(mg *programs.Manager) (names []string) {
		for _, in := range mg.List(ctx) {
			names = append(names, in.Name)
		}
		return names
	}

	f := newFixture(t, st)
	for i := range 6 {
		_, err := f.mg.Deploy(ctx, admin, fmt.Sprintf("p%d", i), manifest(group(fmt.Sprintf("g%d", i))), modOK)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"p0", "p1", "p2", "p3", "p4", "p5"}, walk(f.mg))

	require.NoError(t, f.mg.Remove(ctx, admin, "p2"))
	_, err := f.mg.Deploy(ctx, admin, "p25", manifest(group("g25")), modOK)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "p1a", manifest(group("g1a")), []byte("not a module"))
	require.Error(t, err)
	want := []string{"p0", "p1", "p25", "p3", "p4", "p5"}
	require.Equal(t, want, listed(f.mg))
	require.Equal(t, want, walk(f.mg))
	page, next, err := f.mg.ListPage(ctx, "p1", 1, nil)
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, "p25", page[0].Name, "after a name, the one deployed since that sorts next")
	require.Equal(t, "p25", next)

	f.stop(t)
	g := newFixture(t, st)
	require.Equal(t, want, walk(g.mg), "the names restored")
}
