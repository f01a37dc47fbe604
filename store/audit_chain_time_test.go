package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// wrapped is t moved by k times 2^64 nanoseconds (about 584 years each):
// the same UnixNano, wrapped around int64, and another instant.
func wrapped(t time.Time, k int64) time.Time {
	const sec, nsec = 18446744073, 709551616 // 2^64 ns
	return time.Unix(t.Unix()+k*sec, int64(t.Nanosecond())+k*nsec).UTC()
}

// TestAuditChainBindsTheTime: an insider who rewrites when a record says
// something happened (a delivery moved 584 years away, the stored seconds
// and nanoseconds changed so their UnixNano wraps to the old value) must
// fail verification. The hash takes the time as UnixNano, which only
// names instants between 1678 and 2262, so such records are refused.
func TestAuditChainBindsTheTime(t *testing.T) {
	at := time.Date(2026, 12, 3, 11, 0, 0, 123456789, time.UTC)
	rec := store.AuditRecord{Seq: 1, ID: "aud_1", Type: "delivery.dispatched", Time: at,
		Outcome: "allow", Code: "OK", Subject: "orders", Principal: "svc-billing", PrevHash: store.Genesis}
	rec.Hash = rec.ComputeHash()
	require.NoError(t, store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{rec}))

	for _, tc := range []struct {
		name string
		when time.Time
	}{
		{"584 years later", wrapped(at, 1)},
		{"1168 years later", wrapped(at, 2)},
		{"584 years earlier", wrapped(at, -1)},
		{"the zero time", time.Time{}},
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := rec
			forged.Time = tc.when
			require.False(t, forged.Time.Equal(rec.Time))
			err := store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{forged})
			require.ErrorIs(t, err, store.ErrTampered, "a record moved to %v verified", tc.when)
			// Rehashing does not help either: such a record is never in a chain.
			forged.Hash = forged.ComputeHash()
			require.ErrorIs(t, store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{forged}), store.ErrTampered)
		})
	}
}
