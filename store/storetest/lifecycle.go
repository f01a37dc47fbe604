package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

type op struct {
	name string
	call func(ctx context.Context, s store.Store) error
}

// ops calls every method but Close once, with arguments that would write
// when the store is open.
func ops(s store.Store) []op {
	k := store.GroupKey{Subject: "a", Group: "g"}
	list := []op{
		{"Append", func(ctx context.Context, s store.Store) error {
			_, _, err := s.Append(ctx, message("a", "m1", base))
			return err
		}},
		{"Read", func(ctx context.Context, s store.Store) error { _, err := s.Read(ctx, "a", 0, 0); return err }},
		{"Lookup", func(ctx context.Context, s store.Store) error { _, err := s.Lookup(ctx, "m1"); return err }},
		{"Bounds", func(ctx context.Context, s store.Store) error { _, _, err := s.Bounds(ctx, "a"); return err }},
		{"MarkDone", func(ctx context.Context, s store.Store) error { return s.MarkDone(ctx, k, 1) }},
		{"MarkAttempt", func(ctx context.Context, s store.Store) error { return s.MarkAttempt(ctx, k, 2, 1) }},
		{"LoadGroup", func(ctx context.Context, s store.Store) error { _, err := s.LoadGroup(ctx, k); return err }},
		{"PutQuarantine", func(ctx context.Context, s store.Store) error {
			return s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q1", Time: base})
		}},
		{"GetQuarantine", func(ctx context.Context, s store.Store) error { _, err := s.GetQuarantine(ctx, "q1"); return err }},
		{"ListQuarantine", func(ctx context.Context, s store.Store) error {
			_, err := s.ListQuarantine(ctx, time.Time{}, 0)
			return err
		}},
		{"AppendAudit", func(ctx context.Context, s store.Store) error { return s.AppendAudit(ctx, Chain(1)...) }},
		{"ReadAudit", func(ctx context.Context, s store.Store) error { _, err := s.ReadAudit(ctx, 0, 0); return err }},
		{"AuditHead", func(ctx context.Context, s store.Store) error { _, _, err := s.AuditHead(ctx); return err }},
		{"PutContract", func(ctx context.Context, s store.Store) error {
			return s.PutContract(ctx, store.ContractRecord{ID: "c1", ExpiresAt: at(-time.Hour)})
		}},
		{"GetContract", func(ctx context.Context, s store.Store) error { _, err := s.GetContract(ctx, "c1"); return err }},
		{"DeleteExpiredContracts", func(ctx context.Context, s store.Store) error {
			_, err := s.DeleteExpiredContracts(ctx, base)
			return err
		}},
		{"Put", func(ctx context.Context, s store.Store) error { return s.Put(ctx, "b", "k", []byte("v")) }},
		{"Get", func(ctx context.Context, s store.Store) error { _, err := s.Get(ctx, "b", "k"); return err }},
		{"Delete", func(ctx context.Context, s store.Store) error { return s.Delete(ctx, "b", "k") }},
		{"List", func(ctx context.Context, s store.Store) error { _, err := s.List(ctx, "b"); return err }},
	}
	if _, ok := s.(store.Trimmer); ok {
		list = append(list, op{"TrimBefore", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.Trimmer).TrimBefore(ctx, "a", at(time.Hour))
			return err
		}})
	}
	if _, ok := s.(store.SeqTrimmer); ok {
		list = append(list, op{"TrimThrough", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.SeqTrimmer).TrimThrough(ctx, "a", 1)
			return err
		}})
	}
	if _, ok := s.(store.AuditTrimmer); ok {
		list = append(list, op{"TrimAuditBefore", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.AuditTrimmer).TrimAuditBefore(ctx, at(time.Hour))
			return err
		}})
	}
	if _, ok := s.(store.QuarantineTrimmer); ok {
		list = append(list, op{"TrimQuarantineBefore", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.QuarantineTrimmer).TrimQuarantineBefore(ctx, at(time.Hour))
			return err
		}})
	}
	if _, ok := s.(store.GroupPruner); ok {
		list = append(list, op{"PruneGroups", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.GroupPruner).PruneGroups(ctx, "a", time.Now().Add(time.Hour), func(string) bool { return false })
			return err
		}})
	}
	if _, ok := s.(store.FloorRaiser); ok {
		list = append(list, op{"RaiseFloor", func(ctx context.Context, s store.Store) error {
			return s.(store.FloorRaiser).RaiseFloor(ctx, k, 5)
		}})
	}
	if _, ok := s.(store.GroupLister); ok {
		list = append(list, op{"ListGroups", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.GroupLister).ListGroups(ctx, "a", 0)
			return err
		}})
	}
	if _, ok := s.(store.GroupSubjectLister); ok {
		list = append(list, op{"ListGroupSubjects", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.GroupSubjectLister).ListGroupSubjects(ctx)
			return err
		}})
	}
	if _, ok := s.(store.MessageSubjectLister); ok {
		list = append(list, op{"ListMessageSubjects", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.MessageSubjectLister).ListMessageSubjects(ctx)
			return err
		}})
	}
	if _, ok := s.(store.AttemptLowerer); ok {
		list = append(list, op{"LowerAttempt", func(ctx context.Context, s store.Store) error {
			return s.(store.AttemptLowerer).LowerAttempt(ctx, k, 2, 1, 0)
		}})
	}
	if _, ok := s.(store.ContractLister); ok {
		list = append(list, op{"ListContracts", func(ctx context.Context, s store.Store) error {
			_, err := s.(store.ContractLister).ListContracts(ctx, time.Time{})
			return err
		}})
	}
	return list
}

func (su *suite) testClose(t *testing.T) {
	t.Run("Idempotent", func(t *testing.T) {
		s := su.store(t)
		require.NoError(t, s.Close(t.Context()))
		require.NoError(t, s.Close(t.Context()), "a second Close")
	})

	t.Run("EveryMethodFailsAfterClose", func(t *testing.T) {
		s := su.store(t)
		require.NoError(t, s.Close(t.Context()))
		for _, o := range ops(s) {
			require.ErrorIs(t, o.call(t.Context(), s), store.ErrClosed, o.name)
		}
	})

	t.Run("CloseWithDoneContextStillCloses", func(t *testing.T) {
		s := su.store(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := s.Close(ctx); err != nil {
			require.ErrorIs(t, err, context.Canceled, "Close may only report the context")
		}
		_, _, err := s.Bounds(t.Context(), "a")
		require.ErrorIs(t, err, store.ErrClosed)
	})

	t.Run("CloseWhileBusy", func(t *testing.T) {
		s := su.store(t)
		var wg sync.WaitGroup
		errs := make(chan error, 4*100)
		for w := range 4 {
			wg.Go(func() {
				for i := range 100 {
					_, _, err := s.Append(t.Context(), message("a", fmt.Sprintf("w%d-%d", w, i), base))
					if err != nil && !errors.Is(err, store.ErrClosed) {
						errs <- err
					}
				}
			})
		}
		require.NoError(t, s.Close(t.Context()))
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err, "an Append racing Close fails only with ErrClosed")
		}
		_, _, err := s.Append(t.Context(), message("a", "late", base))
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

func (su *suite) testCanceled(t *testing.T) {
	s := su.store(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, o := range ops(s) {
		require.ErrorIs(t, o.call(ctx, s), context.Canceled, o.name)
	}
	deadline, stop := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer stop()
	for _, o := range ops(s) {
		require.ErrorIs(t, o.call(deadline, s), context.DeadlineExceeded, o.name)
	}

	// Nothing was written.
	live := t.Context()
	requireBounds(t, s, "a", 0, 0)
	requireNotFound(t, s, "m1")
	requireGroup(t, s, store.GroupKey{Subject: "a", Group: "g"}, store.GroupState{})
	_, err := s.GetQuarantine(live, "q1")
	require.ErrorIs(t, err, store.ErrNotFound)
	last, _, err := s.AuditHead(live)
	require.NoError(t, err)
	require.Zero(t, last.Seq)
	_, err = s.GetContract(live, "c1")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Get(live, "b", "k")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func (su *suite) testReopen(t *testing.T) {
	if su.f.Reopen == nil {
		t.Skip("Features.Reopen is nil: the store is not durable")
	}

	t.Run("Empty", func(t *testing.T) {
		s := su.reopen(t, su.store(t))
		requireBounds(t, s, "a", 0, 0)
		last, cp, err := s.AuditHead(t.Context())
		require.NoError(t, err)
		require.Zero(t, last.Seq)
		require.Equal(t, store.Checkpoint{}, cp)
		m := appendAll(t, s, message("a", "m1", base))[0]
		require.Equal(t, uint64(1), m.Seq)
	})

	t.Run("EverythingSurvives", func(t *testing.T) {
		s := su.store(t)
		ctx := t.Context()
		w := writeEverything(t, s)

		s = su.reopen(t, s)
		w.verify(t, s)

		// The store carries on where it stopped, and what it writes now
		// survives the next reopen too.
		next := message("a", "a4", at(time.Minute))
		next.IdemKey, next.IdemExpires = "k-a4", at(time.Hour)
		stored, dup, err := s.Append(ctx, next)
		require.NoError(t, err)
		require.False(t, dup)
		require.Equal(t, uint64(4), stored.Seq, "the sequence continues after reopen")
		w.a = append(w.a, stored)

		again := message("b", "b-again", at(2*time.Minute))
		again.IdemKey, again.IdemExpires = w.a[1].IdemKey, at(time.Hour)
		got, dup, err := s.Append(ctx, again)
		require.NoError(t, err)
		require.True(t, dup, "idempotency survives reopen")
		require.Equal(t, normMessage(w.a[1]), normMessage(got))

		require.NoError(t, s.MarkDone(ctx, w.group, 2))
		w.state = store.GroupState{Floor: 3, Attempts: map[uint64]int{4: 2}}

		more := ChainFrom(store.Checkpoint{Seq: w.audit[3].Seq, Hash: w.audit[3].Hash}, 2)
		require.Error(t, s.AppendAudit(ctx, more[1]), "continuity is checked after reopen")
		require.NoError(t, s.AppendAudit(ctx, more...))
		w.audit = append(w.audit, more...)

		require.NoError(t, s.Put(ctx, "accounts", "carol", []byte("carol-v1")))
		w.kv["accounts"]["carol"] = []byte("carol-v1")

		s = su.reopen(t, s)
		w.verify(t, s)
		got, dup, err = s.Append(ctx, again)
		require.NoError(t, err)
		require.True(t, dup)
		require.Equal(t, "a2", got.ID)
	})
}

// written is what writeEverything wrote, for verify to find again.
type written struct {
	a, b       []store.Message
	trimmed    []store.Message // subject c, only when the store trims
	kept       []store.Message // subject c
	group      store.GroupKey
	state      store.GroupState
	quarantine []store.QuarantineRecord
	audit      []store.AuditRecord
	contracts  []store.ContractRecord
	gone       []string // contracts deleted as expired
	kv         map[string]map[string][]byte
}

func writeEverything(t *testing.T, s store.Store) *written {
	t.Helper()
	ctx := t.Context()
	w := &written{}

	w.a = appendAll(t, s,
		message("a", "a1", base),
		store.Message{Subject: "a", ID: "a2", Time: at(time.Second), IdemKey: "k-a2", IdemExpires: at(time.Hour), Body: []byte("second")},
		store.Message{Subject: "a", ID: "a3", Time: at(2 * time.Second)}, // no body
	)
	w.b = appendAll(t, s, message("b", "b1", base), message("b", "b2", at(time.Second)))
	c := appendAll(t, s, message("c", "c1", base), message("c", "c2", at(time.Second)), message("c", "c3", at(3*time.Second)))
	w.kept = c
	if tr, ok := s.(store.Trimmer); ok {
		n, err := tr.TrimBefore(ctx, "c", at(2*time.Second))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		w.trimmed, w.kept = c[:2], c[2:]
	}

	w.group = store.GroupKey{Subject: "a", Group: "workers"}
	require.NoError(t, s.MarkDone(ctx, w.group, 1))
	require.NoError(t, s.MarkDone(ctx, w.group, 3))
	require.NoError(t, s.MarkAttempt(ctx, w.group, 2, 1))
	require.NoError(t, s.MarkAttempt(ctx, w.group, 2, 4))
	require.NoError(t, s.MarkAttempt(ctx, w.group, 4, 2))
	w.state = store.GroupState{Floor: 1, Done: []uint64{3}, Attempts: map[uint64]int{2: 4, 4: 2}}

	q := store.QuarantineRecord{
		ID: "q1", Time: base, Subject: "a", Principal: "p", Code: "SCHEMA_INVALID", Body: []byte("redacted"),
	}
	released := store.QuarantineRecord{
		ID: "q2", Time: at(time.Second), Subject: "a", Principal: "p", Code: "SENSITIVE_FIELD_DENIED",
		Released: true, ReleasedBy: "admin", ReleasedAt: at(time.Minute), ReleasedAs: "a3",
	}
	require.NoError(t, s.PutQuarantine(ctx, released))
	released.Reason = "replaced once"
	require.NoError(t, s.PutQuarantine(ctx, released))
	require.NoError(t, s.PutQuarantine(ctx, q))
	w.quarantine = []store.QuarantineRecord{q, released}

	w.audit = Chain(4)
	require.NoError(t, s.AppendAudit(ctx, w.audit[:1]...))
	require.NoError(t, s.AppendAudit(ctx, w.audit[1:]...))

	w.contracts = []store.ContractRecord{
		{ID: "live", Principal: "p", IssuedAt: base, ExpiresAt: at(time.Hour), Body: []byte("grants")},
		{ID: "revoked", Principal: "p", IssuedAt: base, ExpiresAt: at(time.Hour), Revoked: true},
	}
	for _, c := range w.contracts {
		require.NoError(t, s.PutContract(ctx, c))
	}
	require.NoError(t, s.PutContract(ctx, store.ContractRecord{ID: "old", ExpiresAt: at(-time.Hour)}))
	n, err := s.DeleteExpiredContracts(ctx, base)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w.gone = []string{"old"}

	require.NoError(t, s.Put(ctx, "accounts", "alice", []byte("alice-v1")))
	require.NoError(t, s.Put(ctx, "accounts", "alice", []byte("alice-v2")))
	require.NoError(t, s.Put(ctx, "accounts", "bob", []byte("bob-v1")))
	require.NoError(t, s.Delete(ctx, "accounts", "bob"))
	require.NoError(t, s.Put(ctx, "roles", "alice", []byte("admin")))
	w.kv = map[string]map[string][]byte{
		"accounts": {"alice": []byte("alice-v2")},
		"roles":    {"alice": []byte("admin")},
	}
	return w
}

func (w *written) verify(t *testing.T, s store.Store) {
	t.Helper()
	ctx := t.Context()

	requireBounds(t, s, "a", 1, uint64(len(w.a)))
	requireRead(t, s, "a", 0, 0, w.a)
	requireBounds(t, s, "b", 1, uint64(len(w.b)))
	requireRead(t, s, "b", 0, 0, w.b)
	requireBounds(t, s, "c", w.kept[0].Seq, w.kept[len(w.kept)-1].Seq)
	requireRead(t, s, "c", 0, 0, w.kept)
	for _, m := range w.trimmed {
		requireNotFound(t, s, m.ID)
	}
	for _, ms := range [][]store.Message{w.a, w.b, w.kept} {
		for _, m := range ms {
			got, err := s.Lookup(ctx, m.ID)
			require.NoError(t, err, "Lookup %s", m.ID)
			require.Equal(t, normMessage(m), normMessage(got))
		}
	}

	requireGroup(t, s, w.group, w.state)

	for _, want := range w.quarantine {
		got, err := s.GetQuarantine(ctx, want.ID)
		require.NoError(t, err)
		require.Equal(t, normQuarantine(want), normQuarantine(got))
	}
	list, err := s.ListQuarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Equal(t, normQuarantine(w.quarantine...), normQuarantine(list...))

	recs, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, normAudit(w.audit...), normAudit(recs...))
	last, cp, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, normAudit(w.audit[len(w.audit)-1]), normAudit(last))
	require.NoError(t, store.VerifyChain(cp, recs))

	for _, want := range w.contracts {
		got, err := s.GetContract(ctx, want.ID)
		require.NoError(t, err)
		require.Equal(t, normContract(want), normContract(got))
	}
	for _, id := range w.gone {
		_, err := s.GetContract(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound, id)
	}

	for bucket, want := range w.kv {
		got, err := s.List(ctx, bucket)
		require.NoError(t, err)
		require.Equal(t, normKV(want), normKV(got), "List %s", bucket)
	}
	_, err = s.Get(ctx, "accounts", "bob")
	require.ErrorIs(t, err, store.ErrNotFound, "a deleted key stays deleted")
}
