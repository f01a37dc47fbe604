package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

func acceptance(principal string) store.AuditRecord {
	return store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Code: "OK", Principal: principal,
		ContractID: "ctr_1", PolicyID: "pol", SchemaID: "sch", Time: base}
}

// requireAccepted requires that the audit log of s verifies and holds one
// acceptance record for each id, with the fields AppendAccepted was given.
func requireAccepted(t *testing.T, s *Store, ids map[string]string) {
	t.Helper()
	ctx := context.Background()
	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	_, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.NoError(t, store.VerifyChain(cp, recs))
	seen := map[string]int{}
	for _, r := range recs {
		if r.Type != "publish.accepted" {
			continue
		}
		seen[r.MessageID]++
		require.Equal(t, ids[r.MessageID], r.Subject, "record of %s", r.MessageID)
		require.Equal(t, fmt.Sprint("aud_", r.Seq), r.ID)
		require.Equal(t, "p-"+r.MessageID, r.Principal)
		require.True(t, base.Equal(r.Time))
	}
	for id := range ids {
		require.Equal(t, 1, seen[id], "acceptance record of %s", id)
	}
	require.Len(t, seen, len(ids))
}

// TestAppendAccepted appends accepted messages from many goroutines beside
// other audit records; every one has exactly one acceptance record in a
// chain that verifies, before and after a restart.
func TestAppendAccepted(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s, err := Open(dir, &Options{Sync: mode})
			require.NoError(t, err)
			ids := map[string]string{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 50 {
						m := msg(fmt.Sprint("s", g%3), fmt.Sprint("m", g, "-", i), base)
						_, dup, err := s.AppendAccepted(ctx, m, acceptance("p-"+m.ID))
						require.NoError(t, err)
						require.False(t, dup)
						mu.Lock()
						ids[m.ID] = m.Subject
						mu.Unlock()
					}
				})
			}
			wg.Go(func() {
				for range 20 {
					require.NoError(t, s.ChainAudit(ctx, []store.AuditRecord{{Type: "other", Time: base}, {Type: "other", Time: base}}))
				}
			})
			wg.Wait()
			requireAccepted(t, s, ids)
			require.NoError(t, s.Close(ctx))
			n, err := VerifyAudit(dir)
			require.NoError(t, err)
			require.Equal(t, uint64(len(ids)+40), n)
			s = open(t, dir, nil)
			requireAccepted(t, s, ids)
		})
	}
}

// TestAppendAcceptedDuplicate: an idempotent retry keeps no second record.
func TestAppendAcceptedDuplicate(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir(), nil)
	m := msg("s", "m1", base)
	m.IdemKey, m.IdemExpires = "k", at(1e12)
	_, dup, err := s.AppendAccepted(ctx, m, acceptance("p-m1"))
	require.NoError(t, err)
	require.False(t, dup)
	retry := m
	retry.ID = "m2"
	got, dup, err := s.AppendAccepted(ctx, retry, acceptance("p-m2"))
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "m1", got.ID)
	requireAccepted(t, s, map[string]string{"m1": "s"})
}

// TestAppendAcceptedRestoresLostRecords: when the audit log's copy of
// acceptance records never reached the disk (here its writes fail until
// the store closes), reopening chains them from the message records, once.
func TestAppendAcceptedRestoresLostRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.ChainAudit(ctx, []store.AuditRecord{{Type: "before", Time: base}}))
	failAudit := errors.New("injected audit write failure")
	s.faults.Store(&faults{write: func(w *logw) error {
		if w == s.audit.w {
			return failAudit
		}
		return nil
	}})
	ids := map[string]string{}
	for i := range 30 {
		m := msg(fmt.Sprint("s", i%2), fmt.Sprint("m", i), base)
		_, _, err := s.AppendAccepted(ctx, m, acceptance("p-"+m.ID))
		require.NoError(t, err, "the message and its record are on disk whatever the audit log does")
		ids[m.ID] = m.Subject
	}
	_, err = s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err, "a reader reads what is committed")
	_ = s.Close(ctx)

	s, err = Open(dir, nil)
	require.NoError(t, err)
	requireAccepted(t, s, ids)
	require.NoError(t, s.Close(ctx))
	s = open(t, dir, nil) // nothing is restored twice
	requireAccepted(t, s, ids)
	n, err := VerifyAudit(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(31), n)
}

// TestAppendAcceptedRefusedWhileAuditUnusable: once the audit log cannot
// be written until a reopen, accepted messages are refused rather than
// queued without end; plain appends go on.
func TestAppendAcceptedRefusedWhileAuditUnusable(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir(), nil)
	s.faults.Store(&faults{write: func(w *logw) error {
		if w != s.audit.w {
			return nil
		}
		// Taking the write back fails too: a directory named like a
		// segment cannot be removed.
		require.NoError(t, os.MkdirAll(filepath.Join(w.dir, segmentName(1000), "x"), 0o750))
		return fmt.Errorf("write: %w", syscall.ENOSPC)
	}})
	require.ErrorIs(t, s.ChainAudit(ctx, []store.AuditRecord{{Type: "x", Time: base}}), store.ErrFull)
	_, _, err := s.AppendAccepted(ctx, msg("s", "m1", base), acceptance("p-m1"))
	require.ErrorContains(t, err, "unusable")
	_, err = s.Lookup(ctx, "m1")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing of a refused append is stored")
	_, _, err = s.Append(ctx, msg("s", "m2", base))
	require.NoError(t, err)
}

// TestAcceptedAfterAuditTrim: audit retention may remove the acceptance
// records of a subject that then stays idle; reopening must not take them
// for records a crash lost (the last message of a subject is always
// after the floor its own record carries), and a crash after the trim
// still loses nothing.
func TestAcceptedAfterAuditTrim(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	for i := range 5 {
		m := msg("idle", fmt.Sprint("old", i), base)
		_, _, err := s.AppendAccepted(ctx, m, acceptance("p-"+m.ID))
		require.NoError(t, err)
	}
	_, err = s.ReadAudit(ctx, 0, 0) // the flusher's work, done now
	require.NoError(t, err)
	n, err := s.TrimAuditBefore(ctx, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 5, n)
	// A later acceptance on another subject, whose audit copy is lost.
	s.faults.Store(&faults{write: func(w *logw) error {
		if w == s.audit.w {
			return errors.New("injected audit write failure")
		}
		return nil
	}})
	late := msg("busy", "new", at(2*time.Hour))
	_, _, err = s.AppendAccepted(ctx, late, acceptance("p-new"))
	require.NoError(t, err)
	_ = s.Close(ctx)

	s = open(t, dir, nil)
	requireAccepted(t, s, map[string]string{"new": "busy"})
}

// TestAcceptTrack: the floor is below the lowest record not committed,
// whatever order commits and failures come in.
func TestAcceptTrack(t *testing.T) {
	type step struct {
		op   string // add, audited, failed, floor
		seq  uint64
		want uint64 // for floor
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"nothing pending", []step{{"floor", 10, 9}}},
		{"in order", []step{{"add", 1, 0}, {"add", 2, 0}, {"floor", 3, 0}, {"audited", 1, 0}, {"floor", 3, 1}, {"audited", 2, 0}, {"floor", 3, 2}}},
		{"a later one first", []step{{"add", 1, 0}, {"add", 2, 0}, {"audited", 2, 0}, {"floor", 3, 0}, {"audited", 1, 0}, {"floor", 3, 2}}},
		{"a failed message", []step{{"add", 1, 0}, {"add", 2, 0}, {"failed", 2, 0}, {"add", 2, 0}, {"audited", 1, 0}, {"floor", 3, 1}, {"audited", 2, 0}, {"floor", 3, 2}}},
		{"restored, not pending", []step{{"audited", 5, 0}, {"floor", 7, 6}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr acceptTrack
			for i, s := range c.steps {
				switch s.op {
				case "add":
					tr.add(s.seq)
				case "audited":
					tr.audited(s.seq)
				case "failed":
					tr.failed(s.seq)
				case "floor":
					require.Equal(t, s.want, tr.floor(s.seq), "step %d", i)
				}
			}
			require.Empty(t, tr.done, "nothing left behind once floors moved past")
		})
	}
}

// TestOutboxOrder: records of failed writes come back before newer ones
// and in the order they failed in, so one subject's records stay in
// sequence order.
func TestOutboxOrder(t *testing.T) {
	o := outbox{kick: make(chan struct{}, 1)}
	rec := func(id string) store.AuditRecord { return store.AuditRecord{MessageID: id} }
	o.put(rec("c"), 3)
	o.putBack([]store.AuditRecord{rec("a1"), rec("a2")}, []uint64{1, 2}) // the first failed request
	o.putBack([]store.AuditRecord{rec("b")}, []uint64{2})                // the next one in the batch
	recs, locs := o.takeLocked()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.MessageID)
	}
	require.Equal(t, []string{"a1", "a2", "b", "c"}, ids)
	require.Equal(t, []uint64{1, 2, 2, 3}, locs)
	recs, _ = o.takeLocked()
	require.Empty(t, recs)
}

// TestAcceptedIDReusedAfterTrim: once retention removed a message its id
// no longer resolves, so the broker accepts a new message with that id.
// When a crash keeps the new acceptance record from the audit log, the
// old message's record, still in the audit log, must not be taken for it:
// recovery matches records by subject and sequence, not by id alone.
func TestAcceptedIDReusedAfterTrim(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	_, _, err = s.AppendAccepted(ctx, msg("s", "x", base), acceptance("p-x"))
	require.NoError(t, err)
	_, err = s.ReadAudit(ctx, 0, 0) // the first record is in the audit log
	require.NoError(t, err)
	n, err := s.TrimThrough(ctx, "s", 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	s.faults.Store(&faults{write: func(w *logw) error {
		if w == s.audit.w {
			return errors.New("injected audit write failure")
		}
		return nil
	}})
	again, _, err := s.AppendAccepted(ctx, msg("s", "x", base), acceptance("p-x"))
	require.NoError(t, err)
	require.Equal(t, uint64(2), again.Seq)
	_ = s.Close(ctx)

	s = open(t, dir, nil)
	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	var seqs []string
	for _, r := range recs {
		if r.Type == "publish.accepted" {
			seqs = append(seqs, r.Seqs)
		}
	}
	require.Equal(t, []string{"1", "2"}, seqs, "the acceptance of the second message with the id is restored")
}
