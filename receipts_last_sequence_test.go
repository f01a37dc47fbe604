package pigeon_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// endOfSequences is a store whose audit log reads as the 1,000 records
// numbered up to 2^64-1, which a forged data directory (its checkpoint
// and chain) can hold: a reader going on from the last one's sequence
// plus one is back at 0, and would read them again.
type endOfSequences struct {
	store.Store
	reads atomic.Int64
}

func (s *endOfSequences) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.reads.Add(1)
	from = max(from, math.MaxUint64-999)
	var out []store.AuditRecord
	for seq := from; len(out) < limit; seq++ {
		out = append(out, store.AuditRecord{Seq: seq, Type: string(pigeon.EventDeliveryDispatched), Subject: "chat.messages", Seqs: "1-9", Count: 9, Principal: "bob"})
		if seq == math.MaxUint64 {
			break
		}
	}
	return out, nil
}

// TestReceiptsEndAtTheLastSequence: Engine.Receipts reads the log in
// pages from the last record's sequence plus one; after a record numbered
// 2^64-1 it stops rather than wrap to 0 and read the log again, for ever.
func TestReceiptsEndAtTheLastSequence(t *testing.T) {
	o := transporttest.Options()
	s := &endOfSequences{Store: memory.New(nil)}
	o.Store = s
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	// The deadline only ends a looping call; a correct one is done at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.reads.Store(0)
	rs, err := e.Receipts(ctx, "X")
	require.NoError(t, err)
	require.Empty(t, rs)
	require.Equal(t, int64(2), s.reads.Load(), "one page per pass")
}
