package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/wal"
)

// trimmingReads is a wal store that, once armed, trims the front of its
// audit log just before a read of it: retention running while a walk of
// the chain is under way.
type trimmingReads struct {
	*wal.Store
	armed  atomic.Bool
	before time.Time
}

func (s *trimmingReads) ReadAudit(ctx context.Context, from uint64, max int) ([]store.AuditRecord, error) {
	if s.armed.CompareAndSwap(true, false) {
		if _, err := s.TrimAuditBefore(ctx, s.before); err != nil {
			return nil, err
		}
	}
	return s.Store.ReadAudit(ctx, from, max)
}

// A walk of the chain that a retention trim overtakes (the walk read the
// checkpoint, the trim moved it and cut the records the walk was to read
// first) is walked again from the new checkpoint: it was reported
// AUDIT_TAMPERED, a false alarm any retention pass could raise, and the
// last verification shown to operators said the log was tampered with.
func TestVerifyAuditOvertakenByRetentionIsNoTampering(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	ws, err := wal.Open(dir, nil)
	require.NoError(t, err)
	st := &trimmingReads{Store: ws}
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk", Now: clk.Now})
	require.NoError(t, err)
	defer closeDurable(t, e, ws)

	s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	clk.Advance(time.Hour)
	s, err = e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err)
	all, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)

	st.before = clk.Now().Add(-time.Minute)
	st.armed.Store(true)
	n, err := e.VerifyAudit(ctx)
	require.NoError(t, err)
	_, cp, err := st.AuditHead(ctx)
	require.NoError(t, err)
	require.NotZero(t, cp.Seq, "the trim ran")
	require.Equal(t, uint64(len(all))-cp.Seq, n, "the records after the new checkpoint verified")
	stats, err := e.Stats(ctx)
	require.NoError(t, err)
	require.True(t, stats.LastVerify.OK, "the last verification shown is no alarm")
}
