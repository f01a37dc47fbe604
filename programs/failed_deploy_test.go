package programs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store"
)

// failingKV is a KV whose writes of program records fail while fail is set.
type failingKV struct {
	store.KV
	fail atomic.Bool
}

func (k *failingKV) Put(ctx context.Context, bucket, key string, val []byte) error {
	if k.fail.Load() && bucket == "programs" {
		return errors.New("disk full")
	}
	return k.KV.Put(ctx, bucket, key, val)
}

// liveContracts is the contracts of principal negotiated and not revoked,
// as the audit records them.
func (f *fixture) liveContracts(t *testing.T, principal string) map[string]bool {
	t.Helper()
	live := map[string]bool{}
	for _, r := range f.audited(t, pigeon.EventContractNegotiated) {
		if r.Principal == principal {
			live[r.ContractID] = true
		}
	}
	for _, r := range f.audited(t, pigeon.EventContractRevoked) {
		delete(live, r.ContractID)
	}
	return live
}

// A deploy that bound its new version, then could not store it (the
// store full or unavailable, the request's context ended), stopped the
// new binding but left the contract negotiated for it live: usable and
// counted among its account's contracts (MaxContractsPerPrincipal) until
// it expired, one more at each such deploy. It is revoked, as a swap
// revokes the contract it replaces.
func TestFailedDeployRevokesItsContract(t *testing.T) {
	for _, tc := range []struct {
		name        string
		first, next programs.Manifest // first zero: the failed deploy is the first
	}{
		{"first deploy", programs.Manifest{}, manifest(group("a"))},
		{"new subscription", manifest(group("a")), manifest(group("b"))},
		{"handover", manifest(func(m *programs.Manifest) { m.Route.Subject = "events" }),
			manifest(func(m *programs.Manifest) { m.Route.Subject, m.Publishes = "events", nil })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := context.Background()
			kv := &failingKV{KV: f.st}
			mg, err := programs.New(ctx, f.e, &programs.Options{KV: kv, Cache: cache})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
			want := map[string]bool{}
			if tc.first.Route.Subject != "" {
				in, err := mg.Deploy(ctx, admin, "p", tc.first, modOK)
				require.NoError(t, err)
				want[in.ContractID] = true
			}
			kv.fail.Store(true)
			_, err = mg.Deploy(ctx, admin, "p", tc.next, modOK)
			require.Equal(t, pigeon.CodeStoreUnavailable, pigeon.ErrorCode(err), "%v", err)
			require.Equal(t, want, f.liveContracts(t, progAcc), "only the running version's contract is live")
			if in, err := mg.Get(ctx, "p"); err == nil {
				require.True(t, in.Bound)
				require.True(t, want[in.ContractID], "the running version keeps its contract")
			}
		})
	}
}
