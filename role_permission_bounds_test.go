package pigeon_test

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
)

// permissionsOf is n permissions, each of publish on its own subject.
func permissionsOf(n int) []pigeon.Permission {
	out := make([]pigeon.Permission, n)
	for i := range out {
		out[i] = pigeon.Permission{Subject: "subject-" + strconv.Itoa(i), Operations: []pigeon.Operation{pigeon.OpPublish}}
	}
	return out
}

// operationsOf is n operations, Operations over again.
func operationsOf(n int) []pigeon.Operation {
	out := make([]pigeon.Operation, n)
	for i := range out {
		out[i] = pigeon.Operations[i%len(pigeon.Operations)]
	}
	return out
}

// signingKeysOf is n signing keys of distinct kids and keys, the same n
// at each call.
func signingKeysOf(n int) []pigeon.PublicKey {
	out := make([]pigeon.PublicKey, n)
	for i := range out {
		seed := make([]byte, ed25519.SeedSize)
		binary.BigEndian.PutUint32(seed, uint32(i)+1)
		pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		out[i] = pigeon.Ed25519PublicKey("sig-"+strconv.Itoa(i), pub)
	}
	return out
}

// directoryBuckets are the store's buckets of the access directory.
var directoryBuckets = []string{"accounts", "roles", "grants", "grants.revoked", "keys.owners"}

// directorySnapshot is every record of the directory's buckets in st.
func directorySnapshot(t *testing.T, st *memory.Store) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, b := range directoryBuckets {
		kv, err := st.List(ctx, b)
		require.NoError(t, err)
		out[b] = map[string]string{}
		for k, v := range kv {
			out[b][k] = string(v)
		}
	}
	return out
}

// grantRolesIn is how many roles the grant records of st carry together.
func grantRolesIn(t *testing.T, st *memory.Store) int {
	t.Helper()
	kv, err := st.List(ctx, "grants")
	require.NoError(t, err)
	n := 0
	for _, v := range kv {
		var g struct {
			Roles []string `json:"roles"`
		}
		require.NoError(t, json.Unmarshal(v, &g))
		n += len(g.Roles)
	}
	return n
}

// createdHolds is a case's held for a write that creates account dave:
// how many entries (count) it holds, 0 when the write was refused.
func createdHolds(count func(pigeon.Account) int) func(*testing.T, *pigeon.Engine, *memory.Store) int {
	return func(t *testing.T, e *pigeon.Engine, _ *memory.Store) int {
		a, err := e.GetAccount(ctx, dave)
		if pigeon.ErrorCode(err) == pigeon.CodeNotFound {
			return 0
		}
		require.NoError(t, err)
		return count(a)
	}
}

// TestMaxPermissionOperationsIsOneOfEachOperation: a permission listing
// every operation once is within the bound, and a longer list names one
// twice. An operation added to Operations moves the bound with it.
func TestMaxPermissionOperationsIsOneOfEachOperation(t *testing.T) {
	require.Equal(t, len(pigeon.Operations), pigeon.MaxPermissionOperations)
}

// TestDirectoryWritesBoundEveryList: every list or map a write of the
// access directory takes is bounded. At its bound it is accepted and held
// whole; one entry over, the write is refused with the bound's code, and
// nothing is written (the store's records of the directory, read again,
// are what they were) or audited, and what the directory held stays.
// Before, PutRole took a role of any number of permissions, and a
// permission of any number of operations, which every node loads and every
// authorization check reads.
func TestDirectoryWritesBoundEveryList(t *testing.T) {
	const wide = "wide"
	cases := []struct {
		name  string
		bound int
		code  pigeon.Code
		// setup makes what write changes; write asks for a list of n
		// entries; held counts the entries the directory holds of it.
		setup func(t *testing.T, e *pigeon.Engine)
		write func(e *pigeon.Engine, n int) error
		held  func(t *testing.T, e *pigeon.Engine, st *memory.Store) int
	}{
		{
			name: "a role's permissions (PutRole)", bound: pigeon.MaxRolePermissions, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.PutRole(ctx, pigeon.Role{Name: wide, Permissions: permissionsOf(1)})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: wide, Permissions: permissionsOf(n)})
				return err
			},
			held: func(t *testing.T, e *pigeon.Engine, _ *memory.Store) int {
				r, err := e.GetRole(ctx, wide)
				require.NoError(t, err)
				return len(r.Permissions)
			},
		},
		{
			name: "a permission's operations (PutRole)", bound: pigeon.MaxPermissionOperations, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.PutRole(ctx, pigeon.Role{Name: wide, Permissions: permissionsOf(1)})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.PutRole(ctx, pigeon.Role{Name: wide, Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: operationsOf(n)}}})
				return err
			},
			held: func(t *testing.T, e *pigeon.Engine, _ *memory.Store) int {
				r, err := e.GetRole(ctx, wide)
				require.NoError(t, err)
				return len(r.Permissions[0].Operations)
			},
		},
		{
			name: "an account's roles (CreateAccount)", bound: pigeon.MaxPrincipalRoles, code: pigeon.CodeInvalidArgument,
			setup: func(*testing.T, *pigeon.Engine) {},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: rolesOf(n)})
				return err
			},
			held: createdHolds(func(a pigeon.Account) int { return len(a.Roles) }),
		},
		{
			name: "an account's roles (AddAccountRole)", bound: pigeon.MaxPrincipalRoles, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: rolesOf(pigeon.MaxPrincipalRoles)})
				require.NoError(t, err)
			},
			// The n-th role: the account holds the n-1 before it.
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.AddAccountRole(ctx, carol, rolesOf(n)[n-1])
				return err
			},
			held: func(t *testing.T, e *pigeon.Engine, _ *memory.Store) int {
				a, err := e.GetAccount(ctx, carol)
				require.NoError(t, err)
				return len(a.Roles)
			},
		},
		{
			name: "an account's attributes (CreateAccount)", bound: pigeon.MaxAccountAttributes, code: pigeon.CodeInvalidArgument,
			setup: func(*testing.T, *pigeon.Engine) {},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Attributes: attributesOf(n, "x")})
				return err
			},
			held: createdHolds(func(a pigeon.Account) int { return len(a.Attributes) }),
		},
		{
			name: "an account's keys (CreateAccount)", bound: pigeon.MaxAccountKeys, code: pigeon.CodeInvalidArgument,
			setup: func(*testing.T, *pigeon.Engine) {},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: dave, Keys: signingKeysOf(n)})
				return err
			},
			held: createdHolds(func(a pigeon.Account) int { return len(a.Keys) }),
		},
		{
			name: "an account's keys (PutAccountKeys)", bound: pigeon.MaxAccountKeys, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.PutAccountKeys(ctx, carol, signingKeysOf(n))
				return err
			},
			held: func(t *testing.T, e *pigeon.Engine, _ *memory.Store) int {
				keys, err := e.AccountKeys(ctx, carol)
				require.NoError(t, err)
				return len(keys)
			},
		},
		{
			name: "a grant's roles (IssueGrant)", bound: pigeon.MaxPrincipalRoles, code: pigeon.CodeInvalidArgument,
			setup: func(t *testing.T, e *pigeon.Engine) {
				_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: rolesOf(pigeon.MaxPrincipalRoles)})
				require.NoError(t, err)
			},
			write: func(e *pigeon.Engine, n int) error {
				_, err := e.IssueGrant(ctx, carol, rolesOf(n), time.Hour)
				return err
			},
			held: func(t *testing.T, _ *pigeon.Engine, st *memory.Store) int { return grantRolesIn(t, st) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := storeOf(t)
			f := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
			tc.setup(t, f.e)
			held := tc.held(t, f.e, st)
			stored := directorySnapshot(t, st)
			audited, err := f.e.Audit(ctx, 0, 0)
			require.NoError(t, err)

			for _, over := range []int{tc.bound + 1, 16 * tc.bound} {
				pe := requireCode(t, tc.write(f.e, over), tc.code)
				require.Contains(t, pe.Message, strconv.Itoa(tc.bound), "the refusal names the bound")
				require.Equal(t, held, tc.held(t, f.e, st), "the directory holds what it held")
				require.Equal(t, stored, directorySnapshot(t, st), "nothing is written")
				now, err := f.e.Audit(ctx, 0, 0)
				require.NoError(t, err)
				require.Len(t, now, len(audited), "nothing is audited")
			}
			// Read again from the store by an engine that takes over
			// from f's, the directory holds what it held.
			again := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
			require.Equal(t, held, tc.held(t, again.e, st))

			require.NoError(t, tc.write(again.e, tc.bound), "at the bound")
			require.Equal(t, tc.bound, tc.held(t, again.e, st))
		})
	}
}
