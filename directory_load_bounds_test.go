package pigeon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// warnings is a log handler that keeps the message of each warning.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// about counts the warnings whose message holds s.
func (w *warnings) about(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// loggingTo has an engine log to w.
func loggingTo(w *warnings) func(*pigeon.Options) {
	return func(o *pigeon.Options) { o.Logger = slog.New(w) }
}

// TestDirectoryLoadTakesAStoredRoleUpToItsBounds: a role stored with
// more permissions than PutRole takes (an earlier broker, a store written
// behind the broker's back) loads with its first MaxRolePermissions, and
// the rest grant nothing; a permission listing more operations than
// MaxPermissionOperations is skipped, as every permission PutRole
// refuses. The node starts, each is one warning (not one per permission
// past the bound), and the role is replaced by a PutRole as any other.
// Before, the role loaded whole, whatever its length, on every node.
func TestDirectoryLoadTakesAStoredRoleUpToItsBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // permissions stored
	}{
		{"one over", pigeon.MaxRolePermissions + 1},
		{"far over", 16 * pigeon.MaxRolePermissions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			perms := permissionsOf(tc.n)
			perms[0] = pigeon.Permission{Subject: "rooms.chat", Operations: operationsOf(pigeon.MaxPermissionOperations + 1)}
			raw, err := json.Marshal(pigeon.Role{Name: "wide", Permissions: perms})
			require.NoError(t, err)
			st := storeOf(t, storedRecord{"roles", "wide", string(raw)})
			var w warnings
			f := accessFixture(t, func(o *pigeon.Options) { o.Store = st }, loggingTo(&w))

			r, err := f.e.GetRole(ctx, "wide")
			require.NoError(t, err)
			require.Equal(t, pigeon.MaxRolePermissions-1, len(r.Permissions),
				"the first MaxRolePermissions, less the one of too many operations")
			require.Equal(t, perms[1:pigeon.MaxRolePermissions], r.Permissions)
			require.Equal(t, 1, w.about("more permissions than PutRole takes"))
			require.Equal(t, 1, w.about("a stored role permission breaks the checks of PutRole"))

			_, err = f.e.PutRole(ctx, pigeon.Role{Name: "wide", Permissions: permissionsOf(1)})
			require.NoError(t, err, "the role stored past its bounds is replaced")
			again := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
			r, err = again.e.GetRole(ctx, "wide")
			require.NoError(t, err)
			require.Equal(t, permissionsOf(1), r.Permissions)
		})
	}
}

// TestDirectoryLoadSkipsAStoredGrantOfMoreRolesThanAPrincipalCarries: a
// grant record carrying more than MaxPrincipalRoles roles is not one
// IssueGrant made: the directory leaves it out with a warning, and its
// token is refused, whatever roles its account holds. One of exactly that
// many loads. Before, the record loaded, and each authentication of its
// token intersected its roles with its account's: a token of a record of
// a million roles, whose account held one of them, authenticated with it.
func TestDirectoryLoadSkipsAStoredGrantOfMoreRolesThanAPrincipalCarries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		roles int
		ok    bool
	}{
		{"at the bound", pigeon.MaxPrincipalRoles, true},
		{"one over", pigeon.MaxPrincipalRoles + 1, false},
		{"far over", 64 * pigeon.MaxPrincipalRoles, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := storeOf(t)
			a := accessFixture(t, func(o *pigeon.Options) { o.Store = st })
			_, err := a.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
			require.NoError(t, err)
			tok, err := a.e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)

			raw, err := st.Get(ctx, "grants", tok.JTI)
			require.NoError(t, err)
			var rec map[string]any
			require.NoError(t, json.Unmarshal(raw, &rec))
			rec["roles"] = append(rolesOf(tc.roles-1), "member")
			raw, err = json.Marshal(rec)
			require.NoError(t, err)
			require.NoError(t, st.Put(ctx, "grants", tok.JTI, raw))

			var w warnings
			b := accessFixture(t, func(o *pigeon.Options) { o.Store = st }, loggingTo(&w))
			p, err := b.e.Authenticate(ctx, tok.Token)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, []string{"member"}, p.Roles)
				require.Zero(t, w.about("a stored grant breaks the checks of IssueGrant"))
				return
			}
			requireCode(t, err, pigeon.CodeUnauthenticated)
			require.Equal(t, 1, w.about("a stored grant breaks the checks of IssueGrant"))
		})
	}
}

// TestDirectoryLoadLogsStoredKeysPastTheBoundOnce: an account stored
// with more keys than PutAccountKeys takes loads with the first
// MaxAccountKeys it would have taken, as before, and the keys past them
// are one warning, not one each. Before, a stored list of a million keys
// was a million warnings at every start and every reload.
func TestDirectoryLoadLogsStoredKeysPastTheBoundOnce(t *testing.T) {
	keys := append([]pigeon.PublicKey{pigeon.Ed25519PublicKey("sig-weak", identityKey)}, signingKeysOf(pigeon.MaxAccountKeys+1000)...)
	raw, err := json.Marshal(keys)
	require.NoError(t, err)
	st := storeOf(t, storedRecord{"accounts", carol, storedAccount(carol, `"keys":`+string(raw))})
	var w warnings
	f := accessFixture(t, func(o *pigeon.Options) { o.Store = st }, loggingTo(&w))

	published, err := f.e.AccountKeys(ctx, carol)
	require.NoError(t, err)
	require.Equal(t, keys[1:1+pigeon.MaxAccountKeys], published, "the weak key left out, then the first MaxAccountKeys")
	require.Equal(t, 1, w.about("a stored account key breaks the checks of PutAccountKeys"), "the weak key")
	require.Equal(t, 1, w.about("more keys than PutAccountKeys takes"), "the 1000 keys past the bound")
}
