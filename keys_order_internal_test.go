package pigeon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// keysOrderObserver runs hook on every account.keys.published record as
// the engine queues it.
type keysOrderObserver struct{ hook func(r AuditRecord) }

func (o *keysOrderObserver) Audited(r AuditRecord) {
	if r.Type == string(EventAccountKeysPublished) {
		o.hook(r)
	}
}
func (*keysOrderObserver) Took(Stage, string, time.Duration)       {}
func (*keysOrderObserver) Committed(CommitLog, int, time.Duration) {}
func (*keysOrderObserver) Noted(Note, string)                      {}

// TestKeyChangesAuditedInTheirOrder: PutAccountKeys audited its change
// after the directory let the account go, so a second change made in
// between (the account rotating, an admin removing the key just
// published) could be recorded first: the log showed a key removed before
// it was published, or a window narrowed after the key was gone. The
// record is now queued while the change still holds the directory's lock.
// The test makes the second change at the one moment it could slip in,
// as the first record is queued: only if the directory is free then.
func TestKeyChangesAuditedInTheirOrder(t *testing.T) {
	ctx := context.Background()
	const id = "spiffe://merchant-prod/ns/shop/sa/keys"
	admin := &Principal{ID: "spiffe://merchant-prod/ns/ops/sa/admin", Roles: []string{RoleAdmin}, Method: AuthToken}
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	k := Ed25519PublicKey("k", pub)

	var e *Engine
	second := make(chan error, 1)
	slipped := false
	obs := &keysOrderObserver{hook: func(r AuditRecord) {
		if !strings.HasSuffix(r.Ref, "+k") || slipped {
			return
		}
		slipped = true
		if !e.dir.mu.TryLock() {
			return // the first change holds the directory: nothing slips in
		}
		e.dir.mu.Unlock()
		_, err := e.PutAccountKeysAs(ctx, admin, id, nil)
		second <- err
	}}
	e, err = New(ctx, &Options{Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	_, err = e.CreateAccount(ctx, Account{ID: id})
	require.NoError(t, err)

	_, err = e.PutAccountKeysAs(ctx, &Principal{ID: id, Method: AuthToken}, id, []PublicKey{k})
	require.NoError(t, err)
	select {
	case err := <-second:
		require.NoError(t, err)
	default:
		_, err = e.PutAccountKeysAs(ctx, admin, id, nil)
		require.NoError(t, err)
	}
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var refs []string
	for _, r := range recs {
		if r.Type == string(EventAccountKeysPublished) {
			refs = append(refs, r.Ref)
		}
	}
	require.Equal(t, []string{"by " + id + ": +k", "by " + admin.ID + ": -k"}, refs, "recorded in the order of the changes")
}
