package wal

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// TestReadWhileTheFrontIsDropped: a read that starts while a trim is
// dropping the front of a log, tidwall/wal already holding the new first
// entry and the store not yet, reads on from the first entry kept, like a
// read just before or after the trim; it is never answered ErrNotFound.
func TestReadWhileTheFrontIsDropped(t *testing.T) {
	s := open(t, t.TempDir(), &Options{Sync: SyncNone, SegmentSize: 512})
	ctx := t.Context()
	appendN(t, s, "a", 0, 6)
	var got []store.Message
	var gotErr error
	s.faults.Store(&faults{truncated: func(w *logw) {
		if w.name == "subject a" && got == nil && gotErr == nil {
			got, gotErr = s.Read(ctx, "a", 1, 10)
		}
	}})
	_, err := s.TrimThrough(ctx, "a", 3)
	require.NoError(t, err)
	require.NoError(t, gotErr)
	seqs := make([]uint64, 0, len(got))
	for _, m := range got {
		seqs = append(seqs, m.Seq)
	}
	require.Equal(t, []uint64{4, 5, 6}, seqs)
}

// TestReadAuditWhileTheFrontIsDropped is the same for the audit log.
func TestReadAuditWhileTheFrontIsDropped(t *testing.T) {
	s := open(t, t.TempDir(), &Options{Sync: SyncNone, SegmentSize: 512})
	ctx := t.Context()
	recs := storetest.Chain(6)
	require.NoError(t, s.AppendAudit(ctx, recs...))
	var got []store.AuditRecord
	var gotErr error
	s.faults.Store(&faults{truncated: func(w *logw) {
		if w == s.audit.w && got == nil && gotErr == nil {
			got, gotErr = s.ReadAudit(ctx, 1, 10)
		}
	}})
	n, err := s.TrimAuditBefore(ctx, recs[3].Time)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.NoError(t, gotErr)
	seqs := make([]uint64, 0, len(got))
	for _, r := range got {
		seqs = append(seqs, r.Seq)
	}
	require.Equal(t, []uint64{4, 5, 6}, seqs)
}
