package pigeon

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// forgedReceiptLog is an audit log such as whoever writes a data
// directory can forge (the chain has no key): k acceptances of message X
// on subject "s" at sequences 1..k, preceded by alone records naming X
// alone on subject "t" and followed by misses batch records of "s" that
// list none of them and hits that list all of them.
func forgedReceiptLog(k, alone, misses, hits int) []store.AuditRecord {
	var log []store.AuditRecord
	add := func(r store.AuditRecord) {
		r.Seq = uint64(len(log) + 1)
		r.Principal = "bob"
		log = append(log, r)
	}
	for range alone {
		add(store.AuditRecord{Type: string(EventDeliveryNacked), Subject: "t", MessageID: "X"})
	}
	for i := 1; i <= k; i++ {
		add(store.AuditRecord{Type: string(EventPublishAccepted), Subject: "s", MessageID: "X", Seqs: strconv.Itoa(i)})
	}
	past := strconv.Itoa(k+1) + "-" + strconv.Itoa(k+256)
	for range misses {
		add(store.AuditRecord{Type: string(EventDeliveryDispatched), Subject: "s", Seqs: past, Count: 256})
	}
	for range hits {
		add(store.AuditRecord{Type: string(EventDeliveryAcked), Subject: "s", Seqs: "1-" + strconv.Itoa(k), Count: k})
	}
	return log
}

// TestReceiptFinderCostOfAForgedLog: a forged log holding many
// acceptances of one id and many records to match against them costs the
// finder work in proportion to the log and the receipts it finds (times a
// logarithm), not to acceptances times records: probes counts the
// acceptances looked at, and the steps of the searches among them. That
// holds too when the acceptances share one sequence (oneSeq), where each
// batch record listing it makes one receipt alone: were every acceptance
// at that sequence looked at for each record, the cost would be their
// product while the receipts, and so Max, stayed small.
func TestReceiptFinderCostOfAForgedLog(t *testing.T) {
	const k = 2000
	for _, tc := range []struct {
		name                string
		alone, misses, hits int
		oneSeq              bool // every acceptance at sequence 1
		receipts            int
	}{
		{name: "batch records listing none of the acceptances", misses: 2000},
		{name: "records of the id alone before the acceptances", alone: 2000, receipts: 2000},
		{name: "batch records listing every acceptance", hits: 20, receipts: 20 * k},
		{name: "batch records listing acceptances at one sequence", hits: 2000, oneSeq: true, receipts: 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := forgedReceiptLog(k, tc.alone, tc.misses, tc.hits)
			if tc.oneSeq {
				for i := range log {
					if Event(log[i].Type) == EventPublishAccepted {
						log[i].Seqs = "1"
					}
				}
			}
			bound := 64 * (len(log) + tc.receipts)
			one := NewReceiptFinder("X")
			for i := range log {
				one.Next(&log[i])
			}
			two := NewReceiptFinder("X")
			for _, pass := range []func(*store.AuditRecord){two.Accepted, two.Next} {
				for i := range log {
					pass(&log[i])
				}
			}
			require.Len(t, two.Receipts, tc.receipts)
			require.LessOrEqual(t, two.probes, bound, "two passes")
			require.LessOrEqual(t, one.probes, bound, "one pass")
		})
	}
}
