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
	"pigeon/store"
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

// heldKV holds the first write of a program's position (which the deploy
// of a program routed from a pubsub subject makes after it has recorded
// the program, before it ends) until let is closed.
type heldKV struct {
	store.KV
	first     atomic.Bool
	held, let chan struct{}
}

func (h *heldKV) Put(ctx context.Context, bucket, key string, val []byte) error {
	if bucket == "program-positions" && h.first.CompareAndSwap(false, true) {
		close(h.held)
		<-h.let
	}
	return h.KV.Put(ctx, bucket, key, val)
}

// A deploy that has recorded its program, but not yet ended, counts once:
// another deploy for the account, at the cap less one, is not refused.
func TestProgramCapCountsARecordedDeployOnce(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	kv := &heldKV{KV: f.st, held: make(chan struct{}), let: make(chan struct{})}
	mg, err := programs.New(ctx, f.e, &programs.Options{KV: kv, Cache: cache, MaxProgramsPerAccount: 2})
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(context.Background())) }()
	onEvents := func(m *programs.Manifest) { m.Route.Subject = "events" } // pubsub: its position is stored
	first := make(chan error, 1)
	go func() {
		_, err := mg.Deploy(ctx, admin, "p0", manifest(onEvents), modOK)
		first <- err
	}()
	select {
	case <-kv.held:
	case err := <-first:
		t.Fatalf("p0 ended before it stored its position: %v", err)
	}
	_, err = mg.Deploy(ctx, admin, "p1", manifest(onEvents), modOK)
	close(kv.let)
	require.NoError(t, err, "p0 takes one place of two, not two")
	require.NoError(t, <-first)
	_, err = mg.Deploy(ctx, admin, "p2", manifest(), modOK)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "both places are taken")
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

// The instances of an account's programs may take at most
// MaxMemoryPerAccount (maxInFlight × (memoryPages × 64 KiB + StackReserve)
// summed over its programs): a deploy that would pass it is refused
// PROGRAM_LIMIT_EXCEEDED and audited, whether a new program or a new
// version asking for more; a version asking for less, a removal or a move
// to another account frees memory; programs restored at start count.
func TestProgramMemoryPerAccountIsCapped(t *testing.T) {
	const page = 64 << 10
	const instance = programs.DefaultMemoryPages*page + programs.StackReserve // 16 MiB + 144 MiB
	f := newFixture(t, nil)
	ctx := context.Background()
	opts := &programs.Options{KV: f.st, Cache: cache, MaxMemoryPerAccount: 3 * instance}
	mg, err := programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, mg.Close(context.Background())) }()
	deploy := func(name, account string, inFlight int, pages uint32) error {
		_, err := mg.Deploy(ctx, admin, name, manifest(func(m *programs.Manifest) {
			m.Account, m.Route.MaxInFlight, m.Limits.MemoryPages = account, inFlight, pages
		}), modOK)
		return err
	}
	require.NoError(t, deploy("a", progAcc, 1, programs.DefaultMemoryPages))
	require.NoError(t, deploy("b", progAcc, 1, programs.DefaultMemoryPages))
	refused := len(f.audited(t, pigeon.EventProgramRefused))
	err = deploy("c", progAcc, 2, programs.DefaultMemoryPages)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(err), "4 instances of 160 MiB > 480 MiB: %v", err)
	require.Contains(t, err.Error(), "640 MiB")
	require.Len(t, f.audited(t, pigeon.EventProgramRefused), refused+1, "the refusal is audited")
	_, err = mg.Get(ctx, "c")
	require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "a refused first deploy leaves nothing")
	require.NoError(t, deploy("c", progAcc, 1, programs.DefaultMemoryPages), "exactly the cap")
	require.NoError(t, deploy("x", other, 2, programs.DefaultMemoryPages), "another account has memory of its own")

	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(deploy("a", progAcc, 2, programs.DefaultMemoryPages)),
		"a new version asking for more is refused")
	info, err := mg.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, info.Version, "and leaves the running one")
	require.NoError(t, deploy("a", progAcc, 1, programs.DefaultMemoryPages/2), "a new version asking for less is taken")
	require.NoError(t, deploy("b", progAcc, 1, programs.DefaultMemoryPages*3/2), "b takes what it freed")
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(deploy("e", progAcc, 1, 1)))
	require.NoError(t, mg.Remove(ctx, admin, "b"))
	require.NoError(t, deploy("e", progAcc, 1, programs.DefaultMemoryPages), "a removal frees memory")
	require.NoError(t, deploy("c", other, 1, 1), "c moves to the other account")
	require.NoError(t, deploy("f", progAcc, 1, programs.DefaultMemoryPages-1), "and frees its memory")

	require.NoError(t, mg.Close(ctx))
	opts.MaxMemoryPerAccount = instance
	mg, err = programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	require.Equal(t, pigeon.CodeProgramLimit, pigeon.ErrorCode(deploy("g", progAcc, 1, 1)), "restored programs count")
	require.NoError(t, deploy("e", progAcc, 1, 1), "and a version asking for less is taken beyond the cap")
}

// By default an account's instances take at most 4 GiB: a program with
// the most instances of the default size is refused; a negative cap
// refuses nothing.
func TestProgramMemoryCapDefault(t *testing.T) {
	require.EqualValues(t, 4<<30, programs.DefaultMaxMemoryPerAccount)
	f := newFixture(t, nil)
	ctx := context.Background()
	wide := manifest(func(m *programs.Manifest) { m.Route.MaxInFlight = pigeon.MaxInFlightLimit })
	for _, tc := range []struct {
		limit int64
		code  pigeon.Code
	}{{0, pigeon.CodeProgramLimit}, {-1, pigeon.CodeOK}} {
		mg, err := programs.New(ctx, f.e, &programs.Options{Cache: cache, MaxMemoryPerAccount: tc.limit})
		require.NoError(t, err)
		_, err = mg.Deploy(ctx, admin, "wide", wide, modOK)
		require.Equal(t, tc.code, pigeon.ErrorCode(err), "limit %d: %v", tc.limit, err)
		require.NoError(t, mg.Close(ctx))
	}
}
