package wal

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// forgeAuditEnd replaces the audit log of the store in dir with records
// numbered up to 2^64-1, the first chained from a checkpoint, as whoever
// writes the data directory can forge them: the chain has no key. They
// are dated an hour apart, from base.
func forgeAuditEnd(t *testing.T, dir string, n int) []store.AuditRecord {
	t.Helper()
	first := uint64(math.MaxUint64) - uint64(n) + 1
	cp := store.Checkpoint{Seq: first - 1, Hash: store.Genesis}
	recs := make([]store.AuditRecord, n)
	prev := cp.Hash
	var data []byte
	for i := range recs {
		r := &recs[i]
		r.Seq, r.ID, r.Type, r.PrevHash = first+uint64(i), "rec", "delivery.dispatched", prev
		r.Time = time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
		r.Hash = r.ComputeHash()
		prev = r.Hash
		data = frame(data, appendAudit(nil, r))
	}
	for _, sg := range segs(t, auditDir(dir)) {
		require.NoError(t, os.Remove(sg.path))
	}
	require.NoError(t, os.WriteFile(filepath.Join(auditDir(dir), segmentName(first)), data, 0o640))
	require.NoError(t, writeFileAtomic(checkpointPath(dir), frame(nil, encodeCheckpointFloors(cp, nil))))
	require.NoError(t, os.Remove(cleanPath(dir)))
	return recs
}

// TestReadAuditEndsAtTheLastSequence: the audit log's entries are the
// records' sequences, so a log forged up to 2^64-1 opens (the chain
// verifies) and ReadAudit went on from its last entry to the sequence
// after it, which wraps to 0: it read the log again from its first entry,
// handing out the same records twice (and, with no page bound, for ever).
// It stops at 2^64-1.
func TestReadAuditEndsAtTheLastSequence(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	require.NoError(t, s.Close(t.Context()))
	recs := forgeAuditEnd(t, dir, 3)

	s = open(t, dir, nil)
	for _, tc := range []struct {
		from uint64
		want int
	}{
		{0, 3},
		{recs[0].Seq, 3},
		{recs[2].Seq, 1},
	} {
		got, err := s.ReadAudit(t.Context(), tc.from, 10)
		require.NoError(t, err)
		require.Len(t, got, tc.want, "from %d", tc.from)
		require.Equal(t, recs[3-tc.want:], got)
	}

	// Nor can the log be cut: the entry after its last would be 0. The
	// trim is refused before it writes a checkpoint, which would have
	// left a cut every Open retried and failed.
	_, err := s.TrimAuditBefore(t.Context(), recs[2].Time.Add(time.Hour))
	require.ErrorContains(t, err, "cannot be trimmed")
	got, err := s.ReadAudit(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Equal(t, recs, got)
	require.NoError(t, s.Close(t.Context()))
	s = open(t, dir, nil)
	_, cp, err := s.AuditHead(t.Context())
	require.NoError(t, err)
	require.Equal(t, recs[0].Seq-1, cp.Seq)
}
