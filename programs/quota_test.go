package programs_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// An account runs at most MaxProgramsPerAccount programs, whoever deploys
// them: one more is refused PROGRAM_LIMIT_EXCEEDED and audited, while new
// versions of its programs, other accounts' programs, and programs moved
// away or removed go on freeing and taking places; programs restored at
// start count.
func TestProgramsPerAccountAreCapped(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	opts := &programs.Options{KV: f.st, Cache: cache, MaxProgramsPerAccount: 2}
	mg, err := programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(context.Background())) }()
	as := func(account string) programs.Manifest {
		return manifest(func(m *programs.Manifest) { m.Account = account })
	}
	deploy := func(name, account string) error {
		_, err := mg.Deploy(ctx, admin, name, as(account), modOK)
		return err
	}
	require.NoError(t, deploy("a", progAcc))
	require.NoError(t, deploy("b", progAcc))
	refused := len(f.audited(t, pigeon.EventProgramRefused))
	err = deploy("c", progAcc)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "%v", err)
	require.Len(t, f.audited(t, pigeon.EventProgramRefused), refused+1, "the refusal is audited")
	_, err = mg.Get(ctx, "c")
	require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "a refused first deploy leaves nothing")
	require.NoError(t, deploy("c", other), "another account has places of its own")
	require.NoError(t, deploy("a", progAcc), "a new version takes no place")

	require.NoError(t, deploy("b", other), "b moves to the other account")
	require.NoError(t, deploy("d", progAcc), "and frees its place")
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(deploy("e", progAcc)))
	require.NoError(t, mg.Remove(ctx, admin, "a"))
	require.NoError(t, deploy("e", progAcc), "a removal frees a place")

	require.NoError(t, mg.Close(ctx))
	opts.MaxProgramsPerAccount = 1
	mg, err = programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(deploy("f", progAcc)), "restored programs count")
	require.NoError(t, deploy("d", progAcc), "and keep taking versions beyond the cap")
}

// Concurrent first deploys for one account never run more programs than
// the cap.
func TestProgramCapUnderConcurrency(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, err := programs.New(ctx, f.e, &programs.Options{KV: f.st, Cache: cache, MaxProgramsPerAccount: 3})
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(context.Background())) }()
	var won, capped atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := mg.Deploy(ctx, admin, fmt.Sprintf("p%d", i), manifest(), modOK)
			switch pigeon.ErrorCode(err) {
			case pigeon.CodeOK:
				won.Add(1)
			case pigeon.CodeProgramLimit:
				capped.Add(1)
			default:
				t.Errorf("deploy p%d: %v", i, err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 3, won.Load())
	require.EqualValues(t, 5, capped.Load())
	require.Len(t, mg.List(ctx), 3)
}

// The default caps; a negative cap does not.
func TestProgramCapDefault(t *testing.T) {
	require.Equal(t, 32, programs.DefaultMaxProgramsPerAccount)
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, err := programs.New(ctx, f.e, &programs.Options{KV: f.st, Cache: cache, MaxProgramsPerAccount: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(context.Background())) }()
	for i := range 3 {
		_, err := mg.Deploy(ctx, admin, fmt.Sprintf("p%d", i), manifest(), modOK)
		require.NoError(t, err)
	}
}
