package storetest

import (
	"fmt"
	"time"

	"pigeon/store"
)

// Chain returns n audit records that form a valid chain from store.Genesis:
// Seq 1 to n, each PrevHash the previous Hash, each Hash computed with
// AuditRecord.ComputeHash. The records are the same on every call, and
// between them every field is set, so a backend that drops one fails.
func Chain(n int) []store.AuditRecord { return ChainFrom(store.Checkpoint{}, n) }

// ChainFrom returns n audit records that continue a chain after cp (a zero
// cp means from Genesis); see Chain.
func ChainFrom(cp store.Checkpoint, n int) []store.AuditRecord {
	prev := cp.Hash
	if prev == "" {
		prev = store.Genesis
	}
	types := [...]string{"publish.accepted", "publish.denied", "quarantine.created", "delivery.dispatched"}
	recs := make([]store.AuditRecord, n)
	for i := range recs {
		seq := cp.Seq + uint64(i) + 1
		r := store.AuditRecord{
			Seq:        seq,
			ID:         fmt.Sprintf("aud-%06d", seq),
			Type:       types[seq%uint64(len(types))],
			Time:       base.Add(time.Duration(seq) * time.Millisecond),
			Outcome:    "accepted",
			Subject:    "payments.authorize",
			Principal:  "svc-checkout",
			ContractID: fmt.Sprintf("ctr-%d", seq%3),
			MessageID:  fmt.Sprintf("msg-%06d", seq),
			PrevHash:   prev,
		}
		if seq%2 == 0 {
			r.Outcome = "denied"
			r.Code = "SCHEMA_INVALID"
			r.Gate = "schema"
			r.PolicyID = "pol-payments"
			r.SchemaID = "payment.authorization.v1"
			r.Ref = fmt.Sprintf("q-%06d", seq)
		}
		if seq%3 == 0 {
			// A batch record: the fields only they carry.
			r.Seqs = fmt.Sprintf("%d-%d,%d", seq, seq+4, seq+9)
			r.Count = 6
			r.Digest = fmt.Sprintf("%064x", seq)
		}
		r.Hash = r.ComputeHash()
		prev = r.Hash
		recs[i] = r
	}
	return recs
}
