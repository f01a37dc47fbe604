package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

func (su *suite) testTrimAudit(t *testing.T) {
	s := su.store(t)
	tr, ok := s.(store.AuditTrimmer)
	if !ok {
		t.Skip("store does not implement store.AuditTrimmer")
	}
	ctx := t.Context()
	recs := Chain(10)
	require.NoError(t, s.AppendAudit(ctx, recs...))

	n, err := tr.TrimAuditBefore(ctx, recs[0].Time)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is before the first record")

	n, err = tr.TrimAuditBefore(ctx, recs[4].Time)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	check := func(t *testing.T, s store.Store, want []store.AuditRecord, wantCP store.Checkpoint) {
		t.Helper()
		last, cp, err := s.AuditHead(ctx)
		require.NoError(t, err)
		require.Equal(t, wantCP, cp, "the checkpoint stands for the removed records")
		if len(want) > 0 {
			require.Equal(t, normAudit(want[len(want)-1]), normAudit(last))
		} else {
			require.Zero(t, last.Seq, "no record is left")
		}
		got, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, normAudit(want...), normAudit(got...))
		require.NoError(t, store.VerifyChain(cp, got), "the remainder verifies from the checkpoint")
		n, err := store.VerifyAudit(ctx, s)
		require.NoError(t, err)
		require.Equal(t, uint64(len(want)), n)
	}
	cp := store.Checkpoint{Seq: recs[3].Seq, Hash: recs[3].Hash}
	check(t, s, recs[4:], cp)

	n, err = tr.TrimAuditBefore(ctx, recs[4].Time)
	require.NoError(t, err)
	require.Zero(t, n, "a second trim at the same time removes nothing")

	more := ChainFrom(store.Checkpoint{Seq: recs[9].Seq, Hash: recs[9].Hash}, 2)
	require.NoError(t, s.AppendAudit(ctx, more...), "the log continues after a trim")
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		tr = s.(store.AuditTrimmer)
		check(t, s, append(recs[4:10:10], more...), cp)
	}

	// Trim everything: the head is gone, the checkpoint stands for it.
	n, err = tr.TrimAuditBefore(ctx, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 8, n)
	check(t, s, nil, store.Checkpoint{Seq: more[1].Seq, Hash: more[1].Hash})
}

func (su *suite) testTrimQuarantine(t *testing.T) {
	s := su.store(t)
	tr, ok := s.(store.QuarantineTrimmer)
	if !ok {
		t.Skip("store does not implement store.QuarantineTrimmer")
	}
	ctx := t.Context()
	var qs []store.QuarantineRecord
	for i := range 6 {
		q := store.QuarantineRecord{ID: fmt.Sprint("q", i), Time: at(time.Duration(i) * time.Second),
			Subject: "payments.authorize", Code: "SCHEMA_INVALID", Body: []byte(`{"card":"[REDACTED]"}`)}
		require.NoError(t, s.PutQuarantine(ctx, q))
		qs = append(qs, q)
	}
	// A release writes an old record again; its Time is still the original.
	qs[1].Released, qs[1].ReleasedBy, qs[1].ReleasedAt = true, "admin", at(time.Minute)
	require.NoError(t, s.PutQuarantine(ctx, qs[1]))

	n, err := tr.TrimQuarantineBefore(ctx, base)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is before the first record")

	n, err = tr.TrimQuarantineBefore(ctx, at(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	check := func(t *testing.T, s store.Store) {
		t.Helper()
		list, err := s.ListQuarantine(ctx, time.Time{}, 0)
		require.NoError(t, err)
		require.Equal(t, normQuarantine(qs[3:]...), normQuarantine(list...))
		for _, q := range qs[:3] {
			_, err := s.GetQuarantine(ctx, q.ID)
			require.ErrorIs(t, err, store.ErrNotFound, q.ID)
		}
	}
	check(t, s)

	n, err = tr.TrimQuarantineBefore(ctx, at(3*time.Second))
	require.NoError(t, err)
	require.Zero(t, n, "a second trim at the same time removes nothing")
	if su.f.Reopen != nil {
		check(t, su.reopen(t, s))
	}
}
