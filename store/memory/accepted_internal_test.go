package memory

import (
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
