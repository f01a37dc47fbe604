package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/wal"
)

// TestStatsAuditRecordsOnAChainingStore: Stats.AuditRecords (the gauge
// pigeon_audit_records and the console's count) is the sequence of the
// last audit record written on a store that chains records itself, as the
// write-ahead log does, as it is on the memory store. It stayed at 0 there:
// the auditor's own head, which it reported, moves only when the auditor
// chains records.
func TestStatsAuditRecordsOnAChainingStore(t *testing.T) {
	dir := t.TempDir()
	ws, err := wal.Open(dir, nil)
	require.NoError(t, err)
	e, err := pigeon.New(ctx, &pigeon.Options{Store: ws, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	defer closeDurable(t, e, ws)

	s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	all, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, all)
	st, err := e.Stats(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.AuditRecords, all[len(all)-1].Seq, "the last record written, at least")
}
