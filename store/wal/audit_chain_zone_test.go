package wal

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// TestAuditTimeZoneRewrittenInTheFile: the hash takes a record's time as
// an instant (UnixNano), not its zone, yet the WAL keeps a zone with every
// time (UTC, Local, or a fixed zone's name and offset). Someone with write
// access to audit/ kept a record's instant and gave it another zone (the
// frame's checksum fixed up): before the Verifier required UTC, Open and
// VerifyAudit passed while an auditor read "2025-03-15 05:09 +1400 UTC"
// for a delivery made on the 14th, and a zone of a day or more made the
// record unexportable (JSON refuses it), so ExportAudit, the API's pages
// of the log and receipts failed on a chain that verified. The broker
// writes every time in UTC, so any other zone is an edit.
func TestAuditTimeZoneRewrittenInTheFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		loc  *time.Location
	}{
		{"named UTC, 14 hours ahead", time.FixedZone("UTC", 14*3600)},
		{"12 hours behind", time.FixedZone("", -12*3600)},
		{"25 hours ahead: not exportable", time.FixedZone("UTC", 25*3600)},
		{"a zero offset of another name", time.FixedZone("EST", 0)},
		{"the local zone", time.Local},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(6)...))
			require.NoError(t, s.Close(t.Context()))
			rewriteAudit(t, dir, func(rs []store.AuditRecord) []store.AuditRecord {
				was := rs[3].Time
				rs[3].Time = was.In(tc.loc)
				require.True(t, rs[3].Time.Equal(was))
				require.Equal(t, rs[3].Hash, rs[3].ComputeHash(), "the hash does not see the zone")
				return rs
			})

			_, err := VerifyAudit(dir)
			require.ErrorIs(t, err, store.ErrTampered)
			require.ErrorContains(t, err, "seq 4")
			var buf bytes.Buffer
			require.ErrorIs(t, ExportAudit(dir, &buf), store.ErrTampered)
			require.Equal(t, 3, bytes.Count(buf.Bytes(), []byte("\n")), "the records before it are exported")
			_, err = Open(dir, nil)
			require.ErrorIs(t, err, store.ErrTampered)
		})
	}
}

// TestAppendAuditKeepsTimesInUTC: a caller may hand AppendAudit a record
// whose time is in another zone (time.Now() is Local); the store keeps the
// instant in UTC, which hashes the same, so the chain it wrote opens again.
func TestAppendAuditKeepsTimesInUTC(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	recs := storetest.Chain(3)
	recs[1].Time = recs[1].Time.In(time.FixedZone("", 3600))
	recs[2].Time = recs[2].Time.Local()
	require.NoError(t, s.AppendAudit(t.Context(), recs...))
	require.NoError(t, s.Close(t.Context()))
	n, err := VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(3), n)
	s = open(t, dir, nil)
	got, err := s.ReadAudit(t.Context(), 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, r := range got {
		require.Same(t, time.UTC, r.Time.Location())
		require.True(t, r.Time.Equal(recs[i].Time))
	}
}
