package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// TestAuditTimeRewrittenInTheFile: someone with write access to audit/
// moves a record's time by 2^64 ns (its stored seconds and nanoseconds
// rewritten, the frame's checksum fixed up). The hash takes the time as
// UnixNano, which wraps to the old value, so before the Verifier refused
// times outside UnixNano's range, Open and VerifyAudit passed and an
// auditor read a delivery as made 584 years away.
func TestAuditTimeRewrittenInTheFile(t *testing.T) {
	for _, k := range []int64{1, -1} {
		dir := t.TempDir()
		s := open(t, dir, nil)
		require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(6)...))
		require.NoError(t, s.Close(t.Context()))
		var was, now time.Time
		rewriteAudit(t, dir, func(rs []store.AuditRecord) []store.AuditRecord {
			was = rs[3].Time
			const sec, nsec = 18446744073, 709551616 // 2^64 ns
			rs[3].Time = time.Unix(was.Unix()+k*sec, int64(was.Nanosecond())+k*nsec).UTC()
			now = rs[3].Time
			return rs
		})
		require.Equal(t, was.UnixNano(), now.UnixNano(), "the forgery keeps the hashed value")

		_, err := VerifyAudit(dir)
		require.ErrorIs(t, err, store.ErrTampered, "time moved from %v to %v", was, now)
		_, err = Open(dir, nil)
		require.ErrorIs(t, err, store.ErrTampered)
	}
}
