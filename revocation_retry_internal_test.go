package pigeon

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// faultyStore is the memory store whose next write of a revoked contract
// fails once armed (failRevoked), and whose audit appends fail while
// failAudit is set.
type faultyStore struct {
	*memory.Store
	failRevoked, failAudit atomic.Bool
	revokedPuts            atomic.Int32 // writes of the contract revoked that reached the store
}

var errFaulty = errors.New("disk on fire")

func (s *faultyStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	if c.Revoked && s.failRevoked.CompareAndSwap(true, false) {
		return errFaulty
	}
	if c.Revoked {
		s.revokedPuts.Add(1)
	}
	return s.Store.PutContract(ctx, c)
}

func (s *faultyStore) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if s.failAudit.Load() {
		return errFaulty
	}
	return s.Store.AppendAudit(ctx, recs...)
}

// countRecords is how many records of ev st holds.
func countRecords(t *testing.T, st store.AuditLog, ev Event) int {
	t.Helper()
	recs, err := st.ReadAudit(context.Background(), 0, 0)
	require.NoError(t, err)
	n := 0
	for _, r := range recs {
		if r.Type == string(ev) {
			n++
		}
	}
	return n
}

// TestRevokeContractRetryStoresTheRevocation: a revocation whose write
// failed is answered with the store's error, the contract already refused
// on this node; its retry writes it (and audits it once), so the store
// holds the contract revoked for the next start. Before, the retry found
// the contract revoked in memory and answered nil without writing it: the
// store kept it unrevoked, and a restarted broker honoured it again.
func TestRevokeContractRetryStoresTheRevocation(t *testing.T) {
	ctx := context.Background()
	st := &faultyStore{Store: memory.New(nil)}
	t.Cleanup(func() { _ = st.Close(ctx) })
	e, err := New(ctx, &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(ctx) })
	p, err := e.Authenticate(ctx, "t")
	require.NoError(t, err)
	s, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
	require.NoError(t, err)
	id := s.Contract().ID()

	st.failRevoked.Store(true)
	err = e.RevokeContract(ctx, p, id)
	require.Error(t, err, "the write failed")
	require.Equal(t, CodeStoreUnavailable, ErrorCode(err))
	_, err = s.Publish(ctx, &Message{Type: "ops.done", Subject: "ops.x", Intent: "test", Data: []byte(`{"n":1}`)})
	require.Equal(t, CodeContractRevoked, ErrorCode(err), "refused on this node at once")
	rec, err := st.GetContract(ctx, id)
	require.NoError(t, err)
	require.False(t, rec.Revoked, "not in the store yet")
	require.Zero(t, countRecords(t, st, EventContractRevoked))

	require.NoError(t, e.RevokeContract(ctx, p, id), "the retry")
	rec, err = st.GetContract(ctx, id)
	require.NoError(t, err)
	require.True(t, rec.Revoked, "the retry wrote it")
	require.Equal(t, 1, countRecords(t, st, EventContractRevoked), "audited once")

	require.NoError(t, e.RevokeContract(ctx, p, id), "once stored, a retry writes nothing")
	require.EqualValues(t, 1, st.revokedPuts.Load())
	require.Equal(t, 1, countRecords(t, st, EventContractRevoked))
}

// TestRemovingADenyNamedRoleIsNotARevocation: taking from an account a
// role that a catalog deny rule names lifts the deny, so it may give
// access: it is refused while the audit log cannot be written and once
// Shutdown began, as a change that gives access; a role no deny rule
// names is still taken in both. Before, every role taken counted as a
// change that only takes access away: a deny lifted without its record.
func TestRemovingADenyNamedRoleIsNotARevocation(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		block func(t *testing.T, e *Engine, st *faultyStore)
	}{
		{"audit log broken", func(t *testing.T, e *Engine, st *faultyStore) {
			st.failAudit.Store(true)
			e.auditor.broken.Store(auditFailure(errFaulty))
		}},
		{"shutdown began", func(t *testing.T, e *Engine, _ *faultyStore) {
			interruptedShutdown(t, e)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &faultyStore{Store: memory.New(nil)}
			t.Cleanup(func() { _ = st.Close(ctx) })
			cat := opsCatalog("v1")
			pub := cat.Subjects[0].Policy[OpPublish]
			cat.Subjects[0].Policy[OpPublish] = append([]RuleSpec{{Effect: "deny", Roles: []string{"muted"}}}, pub...)
			e, err := New(ctx, &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: cat})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Shutdown(ctx) })
			_, err = e.CreateAccount(ctx, Account{ID: revAccount, Roles: []string{"muted", "r"}})
			require.NoError(t, err)

			tc.block(t, e, st)
			_, err = e.RemoveAccountRole(ctx, revAccount, "muted")
			require.Error(t, err, "lifting a deny is refused")
			a, err2 := e.GetAccount(ctx, revAccount)
			require.NoError(t, err2)
			require.Equal(t, []string{"muted", "r"}, a.Roles, "the deny stays")

			a, err = e.RemoveAccountRole(ctx, revAccount, "r")
			require.NoError(t, err, "a role no deny rule names is taken")
			require.Equal(t, []string{"muted"}, a.Roles)
		})
	}
}
