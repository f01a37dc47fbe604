package pigeon_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// forgedReceipts is a store whose audit log holds accepted acceptances
// of the id "X" on one subject (sequences 1 to accepted), then batches
// delivery records that each list all of them: accepted × batches
// receipts of one id.
type forgedReceipts struct {
	store.Store
	accepted, batches uint64
}

func (s *forgedReceipts) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	var out []store.AuditRecord
	for seq := max(from, 1); seq <= s.accepted+s.batches && len(out) < limit; seq++ {
		r := store.AuditRecord{Seq: seq, Subject: "chat.messages", Principal: "bob"}
		if seq <= s.accepted {
			r.Type, r.MessageID, r.Seqs = string(pigeon.EventPublishAccepted), "X", strconv.FormatUint(seq, 10)
		} else {
			r.Type, r.Seqs, r.Count = string(pigeon.EventDeliveryDispatched), "1-"+strconv.FormatUint(s.accepted, 10), int(s.accepted)
		}
		out = append(out, r)
	}
	return out, nil
}

// TestReceiptsCapped: Engine.Receipts answers at most
// DefaultMaxReceipts receipts (WithMaxReceipts chooses another cap): a
// forged log with 200 acceptances of one id and 100 records listing them
// all, 20,000 receipts, is answered with the first 10,000 in chain order
// and an error that is ErrReceiptsTruncated and says how to ask for more;
// a cap at or above the count (or none) answers them all without error,
// and so does the default for a log within it.
func TestReceiptsCapped(t *testing.T) {
	open := func(t *testing.T, accepted, batches uint64) *pigeon.Engine {
		o := transporttest.Options()
		o.Store = &forgedReceipts{Store: memory.New(nil), accepted: accepted, batches: batches}
		e, err := pigeon.New(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		return e
	}
	e := open(t, 200, 100)
	all, err := e.Receipts(ctx, "X", pigeon.WithMaxReceipts(-1))
	require.NoError(t, err)
	require.Len(t, all, 20000)

	rs, err := e.Receipts(ctx, "X")
	require.ErrorIs(t, err, pigeon.ErrReceiptsTruncated)
	require.ErrorContains(t, err, "more than 10000 deliveries")
	require.ErrorContains(t, err, "WithMaxReceipts")
	require.Len(t, rs, pigeon.DefaultMaxReceipts)
	require.Equal(t, all[:pigeon.DefaultMaxReceipts], rs, "the first ones, in chain order")

	for _, tc := range []struct {
		max, want int
		cut       bool
	}{
		{20000, 20000, false},
		{19999, 19999, true},
		{1, 1, true},
		{0, pigeon.DefaultMaxReceipts, true},
	} {
		rs, err := e.Receipts(ctx, "X", pigeon.WithMaxReceipts(tc.max))
		require.Equal(t, tc.cut, errors.Is(err, pigeon.ErrReceiptsTruncated), "max %d: %v", tc.max, err)
		if !tc.cut {
			require.NoError(t, err)
		}
		require.Len(t, rs, tc.want, "max %d", tc.max)
		require.Equal(t, all[:tc.want], rs)
	}

	small := open(t, 10, 10)
	rs, err = small.Receipts(ctx, "X")
	require.NoError(t, err, "100 receipts: within the default")
	require.Len(t, rs, 100)
}

// TestReceiptFinderMax: a ReceiptFinder keeps at most Max receipts
// and says it left some out (Truncated); without Max it keeps them all.
func TestReceiptFinderMax(t *testing.T) {
	s := &forgedReceipts{accepted: 5, batches: 4}
	recs, err := s.ReadAudit(ctx, 1, 100)
	require.NoError(t, err)
	run := func(max int) *pigeon.ReceiptFinder {
		f := pigeon.NewReceiptFinder("X")
		f.Max = max
		for _, pass := range []func(*store.AuditRecord){f.Accepted, f.Next} {
			for i := range recs {
				pass(&recs[i])
			}
		}
		return f
	}
	f := run(0)
	require.False(t, f.Truncated)
	require.Len(t, f.Receipts, 20)
	g := run(7)
	require.True(t, g.Truncated)
	require.Equal(t, f.Receipts[:7], g.Receipts)
	h := run(20)
	require.False(t, h.Truncated, "exactly Max: nothing left out")
	require.Len(t, h.Receipts, 20)
}
