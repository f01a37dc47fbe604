package pigeon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGrantIssueAndRevocationAuditedInTheirOrder: IssueGrant wrote its
// grant.issued record after the directory let the grant go, so a
// revocation made in between (an admin listing grants and revoking the
// new one) could be recorded first, and the log showed a grant revoked
// before it was issued. Both records are now queued under the directory's
// lock. The test revokes the grant at the one moment it could slip in, as
// the issue's record is queued: only if the directory is free then.
func TestGrantIssueAndRevocationAuditedInTheirOrder(t *testing.T) {
	ctx := context.Background()
	const id = "spiffe://merchant-prod/ns/shop/sa/grants"
	var e *Engine
	second := make(chan error, 1)
	slipped := false
	obs := &roleOrderObserver{hook: func(r AuditRecord) {
		if r.Type != string(EventGrantIssued) || slipped {
			return
		}
		slipped = true
		if !e.dir.mu.TryLock() {
			return // the issue holds the directory: nothing slips in
		}
		e.dir.mu.Unlock()
		second <- e.RevokeGrant(ctx, r.Ref)
	}}
	e, err := New(ctx, &Options{Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	_, err = e.CreateAccount(ctx, Account{ID: id, Roles: []string{"reader"}})
	require.NoError(t, err)

	g, err := e.IssueGrant(ctx, id, []string{"reader"}, time.Hour)
	require.NoError(t, err)
	select {
	case err := <-second:
		require.NoError(t, err)
	default:
		require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	}
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var got []string
	for _, r := range recs {
		if r.Type == string(EventGrantIssued) || r.Type == string(EventGrantRevoked) {
			require.Equal(t, g.JTI, r.Ref)
			got = append(got, r.Type)
		}
	}
	require.Equal(t, []string{string(EventGrantIssued), string(EventGrantRevoked)}, got, "recorded in the order of the changes")
}
