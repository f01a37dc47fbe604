package jetstream

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestAuditEndsAtTheLastSequence: a node's chain forged up to 2^64-1 (the
// stream and the checkpoint bucket take whatever is published to them,
// and the chain has no key). Readers going on from a sequence plus one
// wrapped to 0: VerifyAudit read the chain again from its start after its
// last record and reported the valid chain broken; ReadAudit, once the
// checkpoint was the record at 2^64-1, read from 0, handing out records
// retention had removed; and ChainAudit chained a record numbered 0 after
// it. They stop at 2^64-1, and ChainAudit refuses to go past it.
func TestAuditEndsAtTheLastSequence(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx := t.Context()
	s, err := Open(ctx, nc, &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	cp := store.Checkpoint{Seq: math.MaxUint64 - 3, Hash: store.Genesis}
	recs := make([]store.AuditRecord, 3)
	prev := cp.Hash
	for i := range recs {
		r := &recs[i]
		r.Seq, r.ID, r.Type, r.PrevHash = cp.Seq+1+uint64(i), "rec", "delivery.dispatched", prev
		r.Time = time.Date(2026, 12, 5, 1, i, 0, 0, time.UTC)
		r.Hash = r.ComputeHash()
		prev = r.Hash
	}
	require.NoError(t, s.putCheckpoint(ctx, cp, 0))
	require.NoError(t, s.publishAudit(ctx, recs[:2], 0))
	require.NoError(t, s.publishAudit(ctx, recs[2:], 1))

	reports, err := VerifyAudit(ctx, nc, s.Prefix())
	require.NoError(t, err)
	require.Len(t, reports, 1)
	require.NoError(t, reports[0].Err, "the chain verifies to its end")
	require.Equal(t, uint64(3), reports[0].Records)
	require.Equal(t, store.Checkpoint{Seq: math.MaxUint64, Hash: recs[2].Hash}, reports[0].Head)

	got, err := s.ReadAudit(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, recs, got)

	// Nothing continues the chain after 2^64-1.
	next := []store.AuditRecord{{Type: "x", Time: time.Now()}}
	require.ErrorContains(t, s.ChainAudit(ctx, next), "2^64-1")
	got, err = s.ReadAudit(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, recs, got, "nothing was chained")

	// Retention moved the checkpoint to the last record and has not purged
	// its messages yet: nothing is after the checkpoint.
	_, rev, err := s.checkpoint(ctx)
	require.NoError(t, err)
	require.NoError(t, s.putCheckpoint(ctx, store.Checkpoint{Seq: math.MaxUint64, Hash: recs[2].Hash}, rev))
	got, err = s.ReadAudit(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, got)
	reports, err = VerifyAudit(ctx, nc, s.Prefix())
	require.NoError(t, err)
	require.NoError(t, reports[0].Err)
	require.Zero(t, reports[0].Records)
}
