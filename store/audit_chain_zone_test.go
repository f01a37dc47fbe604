package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestAuditChainRefusesAZone: the hash covers a record's instant, not the
// zone a store keeps with it, and every record is written in UTC; a record
// whose time is the same instant in another zone verified, showing
// another wall clock (or, beyond 23 hours, failing every JSON export).
func TestAuditChainRefusesAZone(t *testing.T) {
	at := time.Date(2026, 12, 3, 23, 0, 0, 123456789, time.UTC)
	rec := store.AuditRecord{Seq: 1, ID: "aud_1", Type: "delivery.dispatched", Time: at,
		Outcome: "allow", Subject: "orders", Principal: "svc-billing", PrevHash: store.Genesis}
	rec.Hash = rec.ComputeHash()
	require.NoError(t, store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{rec}))

	for _, tc := range []struct {
		name string
		loc  *time.Location
	}{
		{"named UTC, 14 hours ahead", time.FixedZone("UTC", 14*3600)},
		{"25 hours ahead", time.FixedZone("", 25*3600)},
		{"zero offset, another name", time.FixedZone("EST", 0)},
		{"local", time.Local},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := rec
			forged.Time = at.In(tc.loc)
			require.Equal(t, rec.Hash, forged.ComputeHash())
			err := store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{forged})
			require.ErrorIs(t, err, store.ErrTampered)
			require.ErrorContains(t, err, "UTC")
		})
	}
}

// TestAuditChainRefusesANegativeCount: a batch record's count of -1 with
// seqs listing 2^64-1 sequences verified (uint64(-1) is that count), while
// the receipts' reader takes a count of 0 or less for no batch: the two
// read one record two ways. A negative count is refused.
func TestAuditChainRefusesANegativeCount(t *testing.T) {
	rec := store.AuditRecord{Seq: 1, ID: "aud_1", Type: "delivery.dispatched", Time: time.Date(2026, 12, 3, 23, 0, 0, 0, time.UTC),
		Subject: "orders", Seqs: "1-18446744073709551615", Count: -1, Digest: strings.Repeat("0", 64), PrevHash: store.Genesis}
	rec.Hash = rec.ComputeHash()
	err := store.VerifyChain(store.Checkpoint{}, []store.AuditRecord{rec})
	require.ErrorIs(t, err, store.ErrTampered)
	require.ErrorContains(t, err, "disagree")
}
