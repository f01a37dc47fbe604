package pigeon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// roleOrderObserver runs hook on every audit record as the engine queues
// it; keysOrderObserver (keys_order_internal_test.go) gives it
// the methods it leaves alone.
type roleOrderObserver struct {
	keysOrderObserver
	hook func(r AuditRecord)
}

func (o *roleOrderObserver) Audited(r AuditRecord) { o.hook(r) }

// TestRoleChangesAuditedInTheirOrder: AddAccountRole and
// RemoveAccountRole audited their change after the directory let the
// account go, so a second change of the account's roles made in between
// could be recorded first: the log showed a role taken away before it was
// given, or given back before it was taken, the account's roles at any
// moment misread from it. The record is now queued while the change
// still holds the directory's lock. As TestKeyChangesAuditedInTheirOrder
// does for keys, the test makes the second change at the one moment it
// could slip in, as the first record is queued: only if the directory is
// free then.
func TestRoleChangesAuditedInTheirOrder(t *testing.T) {
	const (
		id   = "spiffe://merchant-prod/ns/shop/sa/roles"
		role = "notifier"
	)
	type change struct {
		ev Event
		do func(ctx context.Context, e *Engine) error
	}
	add := change{EventAccountRoleAdded, func(ctx context.Context, e *Engine) error {
		_, err := e.AddAccountRole(ctx, id, role)
		return err
	}}
	remove := change{EventAccountRoleRemoved, func(ctx context.Context, e *Engine) error {
		_, err := e.RemoveAccountRole(ctx, id, role)
		return err
	}}
	cases := []struct {
		name          string
		roles         []string // the account's to begin with
		first, second change
	}{
		{"added then removed", nil, add, remove},
		{"removed then added", []string{role}, remove, add},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			var e *Engine
			second := make(chan error, 1)
			slipped := false
			obs := &roleOrderObserver{hook: func(r AuditRecord) {
				if r.Type != string(c.first.ev) || slipped {
					return
				}
				slipped = true
				if !e.dir.mu.TryLock() {
					return // the first change holds the directory: nothing slips in
				}
				e.dir.mu.Unlock()
				second <- c.second.do(ctx, e)
			}}
			e, err := New(ctx, &Options{Observer: obs})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			_, err = e.CreateAccount(ctx, Account{ID: id, Roles: c.roles})
			require.NoError(t, err)

			require.NoError(t, c.first.do(ctx, e))
			select {
			case err := <-second:
				require.NoError(t, err)
			default:
				require.NoError(t, c.second.do(ctx, e))
			}
			a, err := e.GetAccount(ctx, id)
			require.NoError(t, err)
			require.ElementsMatch(t, c.roles, a.Roles, "the second change undid the first")

			recs, err := e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			var got []string
			for _, r := range recs {
				if r.Type == string(EventAccountRoleAdded) || r.Type == string(EventAccountRoleRemoved) {
					require.Equal(t, id, r.Principal)
					require.Equal(t, role, r.Ref)
					got = append(got, r.Type)
				}
			}
			require.Equal(t, []string{string(c.first.ev), string(c.second.ev)}, got, "recorded in the order of the changes")
		})
	}
}
