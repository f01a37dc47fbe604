package programs_test

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// waitingForProgramLock polls the goroutines until n of them wait for a
// program's lock in fn (a Manager method, e.g. "Deploy").
func waitingForProgramLock(t *testing.T, fn string, n int) {
	t.Helper()
	eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		count := 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "(*Mutex).Lock") && strings.Contains(g, "programs.(*Manager)."+fn+"(") {
				count++
			}
		}
		return count >= n
	}, fn+" waiting for the program's lock")
}

// A deploy that waited for a program's lock while the first deploy of its
// name failed (or while the program was removed) bound its version on a
// program no longer in the Manager's table: it ran, under its contract,
// but Get and List did not show it, Remove could not reach it, and a
// later deploy of the name bound a second program on the route.
func TestDeployWaitingOnAFailedFirstDeployIsKept(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *fixture)
		first func(f *fixture, pre programs.Precondition) error
	}{
		{
			name: "first deploy refused",
			first: func(f *fixture, pre programs.Precondition) error {
				_, err := f.mg.Deploy(context.Background(), admin, "race", manifest(), modOK, pre)
				return err
			},
		},
		{
			name: "removed",
			setup: func(t *testing.T, f *fixture) {
				_, err := f.mg.Deploy(context.Background(), admin, "race", manifest(), modOK)
				require.NoError(t, err)
			},
			first: func(f *fixture, pre programs.Precondition) error {
				return f.mg.Remove(context.Background(), admin, "race", pre)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := context.Background()
			if tc.setup != nil {
				tc.setup(t, f)
			}
			entered, release := make(chan struct{}), make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				firstDone <- tc.first(f, func(*programs.Info) error {
					close(entered)
					<-release
					if tc.setup != nil {
						return nil // the removal goes on
					}
					return pigeon.NewError(pigeon.CodeForbidden, "refused")
				})
			}()
			<-entered
			type result struct {
				in  programs.Info
				err error
			}
			second := make(chan result, 1)
			go func() {
				in, err := f.mg.Deploy(ctx, admin, "race", manifest(), modOK)
				second <- result{in, err}
			}()
			waitingForProgramLock(t, "Deploy", 1)
			close(release)
			err := <-firstDone
			if tc.setup == nil {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			r := <-second
			require.NoError(t, r.err)
			require.True(t, r.in.Bound)

			got, err := f.mg.Get(ctx, "race")
			require.NoError(t, err, "the program the second deploy bound is the Manager's")
			require.Equal(t, r.in.SHA256, got.SHA256)
			require.Len(t, f.mg.List(ctx), 1)
			require.NoError(t, f.mg.Remove(ctx, admin, "race"))
			require.Empty(t, f.mg.List(ctx))
		})
	}
}
