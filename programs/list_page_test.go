package programs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// TestListPage: ListPage answers the programs keep accepts, by name, at
// most max after the name after, and next, the last of the page while
// another follows; the programs keep refuses take no place in a page and
// next never names one. Following next lists each once. An after that is
// not a program name is INVALID_ARGUMENT; a closed Manager answers
// SHUTTING_DOWN.
func TestListPage(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	var mine, all []string
	for i := range 7 {
		name, m := fmt.Sprintf("p%d", i), manifest(group(fmt.Sprintf("g%d", i)))
		if i%3 == 2 {
			m.Account = other
		} else {
			mine = append(mine, name)
		}
		all = append(all, name)
		_, err := f.mg.Deploy(ctx, admin, name, m, modOK)
		require.NoError(t, err)
	}
	own := func(in programs.Info) bool { return in.Manifest.Account == progAcc }
	walk := func(size int, keep func(programs.Info) bool) (names []string, nexts []string) {
		after := ""
		for range 20 {
			page, next, err := f.mg.ListPage(ctx, after, size, keep)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), size)
			for _, in := range page {
				require.Positive(t, in.Version, "shown as Get shows it")
				names = append(names, in.Name)
			}
			if next == "" {
				return names, nexts
			}
			require.Equal(t, page[len(page)-1].Name, next)
			nexts = append(nexts, next)
			after = next
		}
		t.Fatal("the pages do not end")
		return nil, nil
	}
	for _, size := range []int{1, 2, 3, 10} {
		names, nexts := walk(size, own)
		require.Equal(t, mine, names, "size %d", size)
		require.Subset(t, mine, nexts, "size %d: next names only programs keep accepts", size)
		names, _ = walk(size, nil)
		require.Equal(t, all, names, "size %d, every program", size)
	}
	page, next, err := f.mg.ListPage(ctx, "", 0, nil)
	require.NoError(t, err)
	require.Len(t, page, len(all), "max 0: every one")
	require.Empty(t, next)

	for _, after := range []string{"Upper", "-x", "a b", "p1\n"} {
		_, _, err := f.mg.ListPage(ctx, after, 2, nil)
		require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "after %q", after)
	}
	f.stop(t)
	_, _, err = f.mg.ListPage(ctx, "", 2, nil)
	require.Equal(t, pigeon.CodeShutdown, pigeon.ErrorCode(err))
}
