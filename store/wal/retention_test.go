package wal

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

func TestTrimBeforeSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 2048}
	s := open(t, dir, opts)
	ctx := t.Context()
	ms := appendN(t, s, "a", 1, 100)
	m := msg("a", "keyed", at(200*time.Second))
	m.IdemKey, m.IdemExpires = "k", at(time.Hour)
	keyed, _, err := s.Append(ctx, m)
	require.NoError(t, err)

	n, err := s.TrimBefore(ctx, "a", at(51*time.Second))
	require.NoError(t, err)
	require.Equal(t, 50, n)
	require.Equal(t, append(ms[50:], keyed), readAll(t, s, "a"))
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	f, l, err := s.Bounds(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, [2]uint64{51, 101}, [2]uint64{f, l})
	_, err = s.Lookup(ctx, ms[10].ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err := s.Lookup(ctx, ms[60].ID)
	require.NoError(t, err)
	require.Equal(t, ms[60], got)

	// Trimming the keyed message keeps its deduplication while the key
	// is live; a retry once it has expired is a new message.
	n, err = s.TrimBefore(ctx, "a", at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 51, n)
	m.ID = "keyed-retry"
	orig, dup, err := s.Append(ctx, m)
	require.NoError(t, err)
	require.True(t, dup, "the key is live")
	require.Equal(t, keyed, orig)
	m.ID, m.Time, m.IdemExpires = "keyed-again", at(time.Hour), at(2*time.Hour)
	again, dup, err := s.Append(ctx, m)
	require.NoError(t, err)
	require.False(t, dup)
	require.Equal(t, uint64(102), again.Seq)
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	require.Equal(t, []store.Message{again}, readAll(t, s, "a"))
	_, dup, err = s.Append(ctx, m)
	require.NoError(t, err)
	require.True(t, dup)
}

// Appends and reads go on while a trimmer removes the front.
func TestTrimWhileAppending(t *testing.T) {
	s := open(t, t.TempDir(), &Options{SegmentSize: 4096})
	ctx := t.Context()
	const total = 600
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range total {
			_, _, err := s.Append(ctx, msg("a", fmt.Sprint(i), at(time.Duration(i)*time.Millisecond)))
			require.NoError(t, err)
		}
	})
	wg.Go(func() {
		for i := range 50 {
			_, err := s.TrimBefore(ctx, "a", at(time.Duration(i*10)*time.Millisecond))
			require.NoError(t, err)
			_, err = s.Read(ctx, "a", 0, 20)
			require.NoError(t, err)
		}
	})
	wg.Wait()
	ms := readAll(t, s, "a")
	f, l, err := s.Bounds(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(total), l)
	require.Len(t, ms, int(l-f+1))
	for i, m := range ms {
		require.Equal(t, f+uint64(i), m.Seq)
	}
}

func TestTrimAuditBefore(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 1024}
	s := open(t, dir, opts)
	ctx := t.Context()
	recs := storetest.Chain(20)
	require.NoError(t, s.AppendAudit(ctx, recs...))

	n, err := s.TrimAuditBefore(ctx, recs[7].Time)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	last, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, recs[19], last)
	require.Equal(t, store.Checkpoint{Seq: 7, Hash: recs[6].Hash}, cp)
	got, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, recs[7:], got)
	require.NoError(t, store.VerifyChain(cp, got))

	more := storetest.ChainFrom(store.Checkpoint{Seq: 20, Hash: recs[19].Hash}, 3)
	require.NoError(t, s.AppendAudit(ctx, more...))
	require.NoError(t, s.Close(ctx))

	count, err := VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(16), count)

	s = open(t, dir, opts)
	last, cp2, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, cp, cp2, "the checkpoint is durable")
	require.Equal(t, more[2].Seq, last.Seq)

	// Trim everything: the head is gone, the checkpoint stands for it.
	n, err = s.TrimAuditBefore(ctx, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 16, n)
	last, cp, err = s.AuditHead(ctx)
	require.NoError(t, err)
	require.Zero(t, last.Seq)
	require.Equal(t, store.Checkpoint{Seq: 23, Hash: more[2].Hash}, cp)
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	_, cp2, err = s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, cp, cp2)
	next := storetest.ChainFrom(cp, 2)
	require.Error(t, s.AppendAudit(ctx, storetest.ChainFrom(store.Checkpoint{}, 1)...))
	require.NoError(t, s.AppendAudit(ctx, next...))
	require.NoError(t, s.Close(ctx))
	count, err = VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(2), count)
}

// A crash after the checkpoint was written but before the truncation:
// Open verifies from the checkpoint and finishes the truncation.
func TestAuditCheckpointBeforeTruncation(t *testing.T) {
	for _, good := range []bool{true, false} {
		t.Run(fmt.Sprint("checkpoint matches ", good), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			recs := storetest.Chain(10)
			require.NoError(t, s.AppendAudit(t.Context(), recs...))
			require.NoError(t, s.Close(t.Context()))
			cp := store.Checkpoint{Seq: 5, Hash: recs[4].Hash}
			if !good {
				cp.Hash = recs[3].Hash
			}
			require.NoError(t, writeFileAtomic(checkpointPath(dir), frame(nil, encodeCheckpoint(cp))))
			if !good {
				_, err := Open(dir, nil)
				require.ErrorIs(t, err, store.ErrTampered)
				return
			}
			s = open(t, dir, nil)
			got, err := s.ReadAudit(t.Context(), 0, 0)
			require.NoError(t, err)
			require.Equal(t, recs[5:], got)
			_, cp2, err := s.AuditHead(t.Context())
			require.NoError(t, err)
			require.Equal(t, cp, cp2)
		})
	}
}

func TestAuditCheckpointMissing(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{SegmentSize: 512})
	recs := storetest.Chain(20)
	require.NoError(t, s.AppendAudit(t.Context(), recs...))
	_, err := s.TrimAuditBefore(t.Context(), recs[10].Time)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
	require.NoError(t, os.Remove(checkpointPath(dir)))
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, store.ErrTampered, "records gone without a checkpoint")
}

func TestTrimQuarantineBefore(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 1024}
	s := open(t, dir, opts)
	ctx := t.Context()
	var qs []store.QuarantineRecord
	for i := range 10 {
		q := store.QuarantineRecord{ID: fmt.Sprint("q", i), Time: at(time.Duration(i) * time.Second), Subject: "a", Code: "X", Body: []byte("redacted body")}
		require.NoError(t, s.PutQuarantine(ctx, q))
		qs = append(qs, q)
	}
	// A release re-writes an old record at the end of the log.
	qs[2].Released, qs[2].ReleasedBy, qs[2].ReleasedAt = true, "admin", at(time.Minute)
	require.NoError(t, s.PutQuarantine(ctx, qs[2]))
	qs[7].Released = true
	require.NoError(t, s.PutQuarantine(ctx, qs[7]))

	n, err := s.TrimQuarantineBefore(ctx, at(5*time.Second))
	require.NoError(t, err)
	require.Equal(t, 5, n)
	check := func(s *Store) {
		list, err := s.ListQuarantine(ctx, time.Time{}, 0)
		require.NoError(t, err)
		require.Len(t, list, 5)
		for i, q := range list {
			require.Equal(t, qs[5+i].ID, q.ID)
			require.Equal(t, qs[5+i].Released, q.Released)
		}
		_, err = s.GetQuarantine(ctx, "q2")
		require.ErrorIs(t, err, store.ErrNotFound, "the released copy at the end of the log is trimmed too")
	}
	check(s)
	n, err = s.TrimQuarantineBefore(ctx, at(5*time.Second))
	require.NoError(t, err)
	require.Zero(t, n)
	require.NoError(t, s.Close(ctx))
	s = open(t, dir, opts)
	check(s)
}

// Copies of trimmed messages kept for their live idempotency keys take at
// most maxKeptBytes of memory: beyond it a trimmed message's claim goes
// with it, and a retry is a new message. A claim's expiry frees its share.
func TestKeptCopiesAreBounded(t *testing.T) {
	defer func(n int) { maxKeptBytes = n }(maxKeptBytes)
	s := open(t, t.TempDir(), nil)
	ctx := t.Context()
	keyed := func(id string, d time.Duration) store.Message {
		m := msg("a", id, at(d))
		m.Body = []byte("twenty bytes of body")
		m.IdemKey, m.IdemExpires = "k-"+id, at(d+time.Hour)
		return m
	}
	maxKeptBytes = 30 // room for one body
	var first store.Message
	for i, id := range []string{"m1", "m2"} {
		m, _, err := s.Append(ctx, keyed(id, time.Duration(i)*time.Second))
		require.NoError(t, err)
		if i == 0 {
			first = m
		}
	}
	_, _, err := s.Append(ctx, msg("a", "m3", at(2*time.Second)))
	require.NoError(t, err)
	n, err := s.TrimThrough(ctx, "a", 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	s.msgs.idx.mu.Lock()
	require.Len(t, s.msgs.idx.kept, 1)
	require.Equal(t, 20, s.msgs.idx.keptBytes)
	s.msgs.idx.mu.Unlock()

	retry := keyed("m1", 3*time.Second)
	retry.ID = "m1-retry"
	got, dup, err := s.Append(ctx, retry)
	require.NoError(t, err)
	require.True(t, dup, "within the budget: kept")
	require.Equal(t, first, got)
	retry = keyed("m2", 3*time.Second)
	retry.ID = "m2-retry"
	_, dup, err = s.Append(ctx, retry)
	require.NoError(t, err)
	require.False(t, dup, "beyond the budget: the claim went with the message")
}
