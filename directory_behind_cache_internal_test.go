package pigeon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// behindEngine is an engine with one subject, an account holding the role
// member, and a contract of the account on the subject, negotiated with
// the role, whose access check has cached its result at the directory's
// current version.
func behindEngine(t *testing.T) (*Engine, *contract) {
	t.Helper()
	ctx := context.Background()
	const id = "carol"
	e, err := New(ctx, &Options{Catalog: &Catalog{Subjects: []SubjectPolicy{{
		Name: "t.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"},
		Policy: map[Operation][]RuleSpec{OpPublish: {{Effect: "allow", Principals: []string{id}}}},
	}}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
	_, err = e.CreateAccount(ctx, Account{ID: id, Roles: []string{"member"}})
	require.NoError(t, err)
	info, err := e.Negotiate(ctx, &Principal{ID: id}, "", []string{"t.x"}, time.Minute)
	require.NoError(t, err)
	c, err := e.lookupContract(ctx, info.ID())
	require.NoError(t, err)
	require.Equal(t, []string{"member"}, c.info.Roles)
	code, reason := e.checkAccess(c)
	require.Equal(t, CodeOK, code, reason)
	require.Equal(t, e.dir.version(), c.access.Load().ver, "cached at the current version")
	return e, c
}

// settleStep is one of the two writes settle makes when behind changes:
// publishing behind, or bumping the version.
type settleStep func(d *directory, behind bool)

func publishBehind(d *directory, behind bool) { d.behind.Store(behind) }
func bumpVersion(d *directory, _ bool)        { d.bump() }

// TestCachedAccessCheckRefusedOnceBehind: a contract's access check
// passes on its last result while the directory's version is the one
// that result was cached at. settle publishes behind and bumps the
// version in two steps; this takes them one at a time, in settle's order
// and in the other, and checks the contract at each point. Once behind
// is visible, the check is refused STORE_UNAVAILABLE (behindText) in
// either order: before the bump, where the result cached at the version
// still current would otherwise pass, and, bumped first, after a check in
// between cached its result at the new version. Before, checkAccess took
// the cached result on the version alone, and the contract's check
// passed while the directory read behind.
func TestCachedAccessCheckRefusedOnceBehind(t *testing.T) {
	cases := []struct {
		name  string
		steps []settleStep
	}{
		{"behind published, then the version bumped (settle's order)", []settleStep{publishBehind, bumpVersion}},
		{"the version bumped, then behind published", []settleStep{bumpVersion, publishBehind}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, c := behindEngine(t)
			for i, step := range tc.steps {
				step(&e.dir, true)
				code, reason := e.checkAccess(c)
				if !e.dir.isBehind() {
					require.Equal(t, CodeOK, code, "step %d: not behind yet: %s", i, reason)
					continue
				}
				require.Equal(t, CodeStoreUnavailable, code, "step %d: behind is visible", i)
				require.Equal(t, behindText, reason)
			}
		})
	}
}

// TestCachedAccessCheckAfterCatchingUp: the other way, the directory
// catching up clears behind and bumps the version, in two steps taken
// here one at a time, in settle's order and in the other. While behind,
// the contract's account lost the role the contract relied on (as a
// reload puts what it read in place, bumping the version). No check
// passes on the result cached before the directory fell behind: while
// behind is visible the check is refused STORE_UNAVAILABLE, and once it
// is cleared the check reads the directory again and finds the role
// taken away (GRANT_REVOKED); with nothing changed while behind, the
// check passes again, on a result cached at the version it read.
func TestCachedAccessCheckAfterCatchingUp(t *testing.T) {
	cases := []struct {
		name      string
		steps     []settleStep
		roleTaken bool
	}{
		{"behind cleared, then the version bumped (settle's order)", []settleStep{publishBehind, bumpVersion}, true},
		{"the version bumped, then behind cleared", []settleStep{bumpVersion, publishBehind}, true},
		{"nothing changed while behind", []settleStep{publishBehind, bumpVersion}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, c := behindEngine(t)
			e.dir.staleMu.Lock()
			e.dir.failed = true
			require.True(t, e.dir.settle())
			e.dir.staleMu.Unlock()
			code, _ := e.checkAccess(c)
			require.Equal(t, CodeStoreUnavailable, code)
			if tc.roleTaken {
				unlock := e.dir.lockChange()
				a := cloneAccount(e.dir.accounts[c.info.Principal])
				a.Roles = nil
				e.dir.accounts[c.info.Principal] = &a
				e.dir.bump()
				unlock()
			}
			e.dir.staleMu.Lock()
			e.dir.failed = false
			e.dir.staleMu.Unlock()
			for i, step := range tc.steps {
				step(&e.dir, false)
				code, reason := e.checkAccess(c)
				switch {
				case e.dir.isBehind():
					require.Equal(t, CodeStoreUnavailable, code, "step %d: behind is visible", i)
				case tc.roleTaken:
					require.Equal(t, CodeGrantRevoked, code, "step %d: caught up: %s", i, reason)
				default:
					require.Equal(t, CodeOK, code, "step %d: caught up: %s", i, reason)
					require.Equal(t, e.dir.version(), c.access.Load().ver, "cached at the version it read")
				}
			}
		})
	}
}
