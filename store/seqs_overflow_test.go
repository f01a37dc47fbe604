package store_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestCountSeqsCannotWrap: the ranges of a batch record are ascending and
// disjoint within 1..2^64-1, so they list at most 2^64-1 sequences and
// their count is exact. Ranges that would sum past 2^64-1, and so match a
// small count modulo 2^64, overlap, and are refused.
func TestCountSeqsCannotWrap(t *testing.T) {
	for _, tc := range []struct {
		seqs string
		n    uint64
		ok   bool
	}{
		{"1-18446744073709551615", math.MaxUint64, true},
		{"1-9223372036854775808,9223372036854775809-18446744073709551615", math.MaxUint64, true},
		{"18446744073709551615", 1, true},
		{"1-18446744073709551615,1-6", 0, false},                  // would count 2^64+5
		{"2-18446744073709551615,1-7", 0, false},                  // would count 2^64+5
		{"1-18446744073709551615,18446744073709551615", 0, false}, // would count 0
		{"18446744073709551615,1-5", 0, false},
	} {
		t.Run(tc.seqs, func(t *testing.T) {
			n, ok := store.CountSeqs(tc.seqs)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, tc.n, n)
			}
		})
	}
}

// chained returns r as the record after cp, its hash computed, as whoever
// writes the data directory can forge it: the chain has no key.
func chained(cp store.Checkpoint, r store.AuditRecord) store.AuditRecord {
	r.Seq, r.PrevHash = cp.Seq+1, cp.Hash
	r.ID, r.Type = "rec", "delivery.dispatched"
	r.Time = time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	r.Hash = r.ComputeHash()
	return r
}

// TestVerifierRefusesNumbersThatWrap: a record whose numbers would only
// agree modulo 2^64 does not verify: a batch record whose ranges would
// sum to its count plus 2^64, and a record numbered after 2^64-1 (as 0,
// which the checkpoint's sequence plus one wraps to).
func TestVerifierRefusesNumbersThatWrap(t *testing.T) {
	digest := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		from store.Checkpoint
		rec  store.AuditRecord
	}{
		{
			name: "a count its ranges match modulo 2^64",
			from: store.Checkpoint{Seq: 7, Hash: store.Genesis},
			rec:  store.AuditRecord{Subject: "chat", Seqs: "1-18446744073709551615,1-6", Count: 5, Digest: digest},
		},
		{
			name: "a record after 2^64-1",
			from: store.Checkpoint{Seq: math.MaxUint64, Hash: store.Genesis},
			rec:  store.AuditRecord{Subject: "chat", Seqs: "4-8", Count: 5, Digest: digest},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chained(tc.from, tc.rec)
			err := store.VerifyChain(tc.from, []store.AuditRecord{r})
			require.ErrorIs(t, err, store.ErrTampered)
		})
	}
	// The same records with numbers that agree verify.
	ok := chained(store.Checkpoint{Seq: 7, Hash: store.Genesis}, store.AuditRecord{Subject: "chat", Seqs: "4-8", Count: 5, Digest: digest})
	require.NoError(t, store.VerifyChain(store.Checkpoint{Seq: 7, Hash: store.Genesis}, []store.AuditRecord{ok}))
	last := chained(store.Checkpoint{Seq: math.MaxUint64 - 1, Hash: store.Genesis}, store.AuditRecord{Subject: "chat", Seqs: "4-8", Count: 5, Digest: digest})
	require.NoError(t, store.VerifyChain(store.Checkpoint{Seq: math.MaxUint64 - 1, Hash: store.Genesis}, []store.AuditRecord{last}))
}
