package pigeon_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
)

// keyReads is a memory store that counts the reads of each key.
type keyReads struct {
	*memory.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *keyReads) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	s.mu.Lock()
	s.reads[key]++
	s.mu.Unlock()
	return s.Store.Get(ctx, bucket, key)
}

func (s *keyReads) readsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[key]
}

// TestDirectoryChangesOfInvalidIDsReadNothing: a change of an account or
// a role this node does not hold (DeleteAccount, AddAccountRole,
// RemoveAccountRole, DeleteRole, IssueGrant) looks for it in the store
// before it answers NOT_FOUND, in case another node created it a moment
// ago. It looked for any id it was given, one no account or role can
// have included (100 KB long, or holding a space), at the cost of a
// store read each. Such an id is now NOT_FOUND without a read, as
// GetAccount and GetRole answer it; an unknown id of valid form is still
// looked for, and NOT_FOUND. RevokeGrant answers a grant id no grant can
// have NOT_FOUND without a read, as before.
func TestDirectoryChangesOfInvalidIDsReadNothing(t *testing.T) {
	st := &keyReads{Store: memory.New(nil), reads: map[string]int{}}
	e := accessFixture(t, func(o *pigeon.Options) { o.Store = st }).e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)

	calls := []struct {
		name string
		call func(id string) error
	}{
		{"DeleteAccount", func(id string) error { return e.DeleteAccount(ctx, id) }},
		{"AddAccountRole", func(id string) error { _, err := e.AddAccountRole(ctx, id, "member"); return err }},
		{"RemoveAccountRole", func(id string) error { _, err := e.RemoveAccountRole(ctx, id, "member"); return err }},
		{"DeleteRole", func(id string) error { return e.DeleteRole(ctx, id) }},
		{"IssueGrant", func(id string) error { _, err := e.IssueGrant(ctx, id, []string{"member"}, time.Hour); return err }},
		{"RevokeGrant", func(id string) error { return e.RevokeGrant(ctx, id) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			for _, id := range []string{strings.Repeat("a", 100<<10), "no one", "a/../b"} {
				before := st.readsOf(id)
				err := c.call(id)
				require.Equal(t, before, st.readsOf(id), "the store was read for an id of %d bytes no record can have", len(id))
				requireCode(t, err, pigeon.CodeNotFound)
			}
			unknown := "nobody-" + strings.ToLower(c.name)
			requireCode(t, c.call(unknown), pigeon.CodeNotFound)
			require.NotZero(t, st.readsOf(unknown), "an unknown id of valid form is looked for in the store")
		})
	}
}

// TestRemoveAccountRoleOfAnInvalidRoleName: taking from an account a role
// name no role can have (100 KB long, or holding a space) is refused as
// PutRole refuses the name, INVALID_ARGUMENT, with no write and no
// record; before, the account was written back unchanged and
// account.role.removed audited, the name in its ref.
func TestRemoveAccountRoleOfAnInvalidRoleName(t *testing.T) {
	e := accessFixture(t).e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: "erin"})
	require.NoError(t, err)
	for _, role := range []string{strings.Repeat("r", 100<<10), "no role", ""} {
		_, err := e.RemoveAccountRole(ctx, "erin", role)
		requireCode(t, err, pigeon.CodeInvalidArgument)
	}
	require.Empty(t, auditOf(t, e, pigeon.EventAccountRoleRemoved))
}
