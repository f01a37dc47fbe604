package memory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// queueUnderLock is a queue that records what it is handed and whether a
// reader of the store could have read the message log meanwhile.
type queueUnderLock struct {
	s        *Store
	got      []store.AuditRecord
	readable []bool
}

func (q *queueUnderLock) QueueAudit(r store.AuditRecord) {
	q.got = append(q.got, r)
	ok := q.s.msgs.mu.TryRLock()
	if ok {
		q.s.msgs.mu.RUnlock()
	}
	q.readable = append(q.readable, ok)
}

// TestAppendAcceptedToReceipt: AppendAcceptedTo hands the queue the
// acceptance record of a stored message (its subject, id and sequence
// set), while no reader can read the message log, so the record is queued
// before anyone can be handed the message; a duplicate or a refused
// append hands it nothing.
func TestAppendAcceptedToReceipt(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	q := &queueUnderLock{s: s}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	acc := store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Principal: "p", Time: t0}

	for _, tc := range []struct {
		name    string
		m       store.Message
		dup     bool
		handed  int
		seqs    string
		closing bool
	}{
		{name: "first", m: store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour)}, handed: 1, seqs: "1"},
		{name: "second", m: store.Message{Subject: "a", ID: "m2", Time: t0}, handed: 2, seqs: "2"},
		{name: "duplicate", m: store.Message{Subject: "a", ID: "m3", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour)}, dup: true, handed: 2},
		{name: "closed", m: store.Message{Subject: "a", ID: "m4", Time: t0}, closing: true, handed: 2},
	} {
		if tc.closing {
			require.NoError(t, s.Close(ctx))
		}
		got, dup, err := s.AppendAcceptedTo(ctx, tc.m, acc, q)
		require.Equal(t, tc.closing, err != nil, tc.name)
		require.Equal(t, tc.dup, dup, tc.name)
		require.Len(t, q.got, tc.handed, tc.name)
		if tc.seqs == "" {
			continue
		}
		want := acc
		want.Subject, want.MessageID, want.Seqs = "a", tc.m.ID, tc.seqs
		require.Equal(t, want, q.got[tc.handed-1], tc.name)
		require.Equal(t, tc.seqs, strconv.FormatUint(got.Seq, 10), tc.name)
		require.False(t, q.readable[tc.handed-1], "%s: the message log was readable while the record was handed over", tc.name)
	}
}

// QueueAudits records a batch of records as QueueAudit does each, with
// whether a reader could read the message log meanwhile.
func (q *queueUnderLock) QueueAudits(recs []store.AuditRecord) {
	for _, r := range recs {
		q.QueueAudit(r)
	}
}

// TestAppendAcceptedBatchToReceipt: AppendAcceptedBatchTo appends a batch
// in order under one lock, as AppendAcceptedTo would one by one: each
// stored message gets the next sequence of its subject and its
// acceptance record (subject, id and sequence set) is handed to the
// queue, in batch order, while no reader can read the message log. The
// batch stops after the first duplicate (of a message stored before or
// earlier in the batch), so that the caller answers it before the rest;
// a closed store or a done context refuses every message and hands
// nothing. The caller's records are not changed.
func TestAppendAcceptedBatchToReceipt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	acc := store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Principal: "p", Time: t0}
	msg := func(subject, id, key string) store.Message {
		m := store.Message{Subject: subject, ID: id, Time: t0, Body: []byte(`{"id":"` + id + `"}`)}
		if key != "" {
			m.IdemKey, m.IdemExpires = key, t0.Add(time.Hour)
		}
		return m
	}
	type outcome struct {
		seq uint64
		dup string // the id of the original
	}
	for _, tc := range []struct {
		name    string
		before  []store.Message // appended first, one by one
		batch   []store.Message
		closing bool
		done    bool
		want    []outcome // one per message taken
		refused bool      // every message refused
	}{
		{name: "stored in order", batch: []store.Message{msg("a", "m1", ""), msg("b", "m2", "k2"), msg("a", "m3", "")},
			want: []outcome{{seq: 1}, {seq: 1}, {seq: 2}}},
		{name: "after earlier appends", before: []store.Message{msg("a", "m0", "")}, batch: []store.Message{msg("a", "m1", ""), msg("a", "m2", "")},
			want: []outcome{{seq: 2}, {seq: 3}}},
		{name: "duplicate within the batch stops it", batch: []store.Message{msg("a", "m1", "k"), msg("a", "m2", "k"), msg("a", "m3", "")},
			want: []outcome{{seq: 1}, {dup: "m1"}}},
		{name: "duplicate of a stored message first", before: []store.Message{msg("a", "m0", "k")}, batch: []store.Message{msg("a", "m1", "k"), msg("a", "m2", "")},
			want: []outcome{{dup: "m0"}}},
		{name: "closed", batch: []store.Message{msg("a", "m1", ""), msg("a", "m2", "")}, closing: true, refused: true},
		{name: "context done", batch: []store.Message{msg("a", "m1", ""), msg("a", "m2", "")}, done: true, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil)
			ctx := t.Context()
			for _, m := range tc.before {
				_, _, err := s.Append(ctx, m)
				require.NoError(t, err)
			}
			if tc.closing {
				require.NoError(t, s.Close(ctx))
			}
			if tc.done {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			accs := make([]store.AuditRecord, len(tc.batch))
			for i := range accs {
				accs[i] = acc
			}
			q := &queueUnderLock{s: s}
			got := s.AppendAcceptedBatchTo(ctx, make([]store.Appended, 1), tc.batch, accs, q)
			for i := range accs {
				require.Equal(t, acc, accs[i], "the caller's record %d is not changed", i)
			}
			if tc.refused {
				require.Len(t, got, len(tc.batch))
				for _, r := range got {
					require.Error(t, r.Err)
				}
				require.Empty(t, q.got)
				return
			}
			require.Len(t, got, len(tc.want))
			var handed []store.AuditRecord
			for i, w := range tc.want {
				require.NoError(t, got[i].Err, "message %d", i)
				if w.dup != "" {
					require.True(t, got[i].Dup, "message %d", i)
					require.Equal(t, w.dup, got[i].Stored.ID, "message %d", i)
					continue
				}
				require.False(t, got[i].Dup, "message %d", i)
				require.Equal(t, w.seq, got[i].Stored.Seq, "message %d", i)
				m, err := s.Lookup(ctx, tc.batch[i].ID)
				require.NoError(t, err)
				require.Equal(t, w.seq, m.Seq, "message %d", i)
				require.Equal(t, tc.batch[i].Body, m.Body, "message %d", i)
				r := acc
				r.Subject, r.MessageID, r.Seqs = tc.batch[i].Subject, tc.batch[i].ID, strconv.FormatUint(w.seq, 10)
				handed = append(handed, r)
			}
			require.Equal(t, handed, q.got, "the records of the stored messages, in order")
			for i, ok := range q.readable {
				require.False(t, ok, "record %d: the message log was readable while it was handed over", i)
			}
			if len(got) < len(tc.batch) {
				_, err := s.Lookup(ctx, tc.batch[len(got)].ID)
				require.ErrorIs(t, err, store.ErrNotFound, "the messages after a duplicate are not taken")
			}
		})
	}
}

// TestAppendAcceptedAllocs: a message accepted the way the broker accepts
// one (AppendAcceptedTo with a new id and key, then its record appended to
// the audit log) costs the store no allocation of its own: chunks, arenas
// and tables are made once for many messages, and the decimal sequences of
// the acceptance records share buffers.
func TestAppendAcceptedAllocs(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const held, n = 1000, 2000 // held first: sequences of three digits and more
	ms := make([]store.Message, held+n+1)
	ids := make([]string, len(ms))
	for i := range ms {
		ms[i] = store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: t0.Add(time.Duration(i)), Body: make([]byte, 700),
			IdemKey: "a\x00p\x00k" + strconv.Itoa(i), IdemExpires: t0.Add(time.Hour)}
		ids[i] = "aud_" + strconv.Itoa(i+1)
	}
	acc := store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Principal: "p", Time: t0}
	q := &acceptances{}
	i := 0
	accept := func() {
		_, dup, err := s.AppendAcceptedTo(ctx, ms[i], acc, q)
		require.NoError(t, err)
		require.False(t, dup)
		r := q.last
		r.Seq, r.ID, r.Hash = uint64(i+1), ids[i], "h"
		require.NoError(t, s.AppendAudit(ctx, r))
		i++
	}
	for range held {
		accept()
	}
	require.Zero(t, testing.AllocsPerRun(n, accept), "allocations per accepted message")
}

// acceptances keeps the last record it is handed.
type acceptances struct{ last store.AuditRecord }

func (q *acceptances) QueueAudit(r store.AuditRecord) { q.last = r }

// TestDecimals: the decimal strings handed out share buffers, and stay as
// they were however many follow.
func TestDecimals(t *testing.T) {
	var d decimals
	const n = 3 * decimalsBuf
	var got []string
	for x := range uint64(n) {
		got = append(got, d.format(x*x*x))
	}
	got = append(got, d.format(0), d.format(1<<64-1))
	for x := range uint64(n) {
		require.Equal(t, strconv.FormatUint(x*x*x, 10), got[x])
	}
	require.Equal(t, []string{"0", "18446744073709551615"}, got[n:])
}
