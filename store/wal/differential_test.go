package wal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// TestDifferentialMemory runs one random sequence of appends (with ids
// reused once their holders are gone, as the broker allows, and shared
// idempotency keys), trims of every kind, reads and reopens
// against the memory store and this one, and requires that they answer
// alike: where the conformance suite is silent, the two stores must still
// agree, since the broker treats them as interchangeable.
//
// Message times never go back here. When they do (concurrent publishes
// reach the store out of the order of their times), both stores forget a
// key once the newest time seen passes its expiry, the memory store at
// once (less Options.IdempotencyGrace), this one at its next sweep, so a
// message stamped before the expiry but arriving after may or may not be
// a duplicate: a documented difference, not checked.
func TestDifferentialMemory(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { differential(t, seed) })
	}
}

func differential(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	mem := memory.New(nil)
	defer mem.Close(ctx)
	dir := t.TempDir()
	opts := &Options{Sync: SyncNone, SegmentSize: 1024}
	w, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { _ = w.Close(ctx) }()

	subjects := []string{"a", "a.b", "b%2F", ".x"}
	ids := []string{"", "i1", "i2", "i3", "i4", "i5"}
	keys := []string{"", "", "k1", "k2", "k3"}
	now := base
	for step := range 400 {
		op := rng.IntN(20)
		what := fmt.Sprintf("step %d op %d", step, op)
		sub := subjects[rng.IntN(len(subjects))]
		switch {
		case op < 11:
			now = now.Add(time.Duration(rng.IntN(3)) * time.Second) // never back: see the test's doc
			id := ids[rng.IntN(len(ids))]
			if _, err := mem.Lookup(ctx, id); err == nil {
				id = fmt.Sprint("u", step) // the broker refuses an id a retained message holds
			}
			m := store.Message{Subject: sub, ID: id, Time: now, Body: []byte(fmt.Sprintf("body-%d-%s", step, string(make([]byte, rng.IntN(40)))))}
			if k := keys[rng.IntN(len(keys))]; k != "" {
				m.IdemKey, m.IdemExpires = k, now.Add(time.Duration(rng.IntN(12))*time.Second)
			}
			logf(t, "%s: append %s id=%s key=%s t=%v exp=%v", what, m.Subject, m.ID, m.IdemKey, m.Time.Sub(base), m.IdemExpires.Sub(base))
			ms, mdup, merr := mem.Append(ctx, m)
			ws, wdup, werr := w.Append(ctx, m)
			require.NoError(t, merr, what)
			require.NoError(t, werr, what)
			logf(t, "%s: -> seq %d dup %v (wal: seq %d dup %v)", what, ms.Seq, mdup, ws.Seq, wdup)
			require.Equal(t, mdup, wdup, "%s: dup of %+v", what, m)
			requireSameMessage(t, ms, ws, what)
		case op < 12:
			cut := now.Add(-time.Duration(rng.IntN(10)) * time.Second)
			logf(t, "%s: trim %s before %v", what, sub, cut.Sub(base))
			mn, merr := mem.TrimBefore(ctx, sub, cut)
			wn, werr := w.TrimBefore(ctx, sub, cut)
			require.NoError(t, merr, what)
			require.NoError(t, werr, what)
			require.Equal(t, mn, wn, what)
		case op < 13:
			_, last, err := mem.Bounds(ctx, sub)
			require.NoError(t, err)
			seq := uint64(rng.IntN(int(last) + 2))
			logf(t, "%s: trim %s through %d", what, sub, seq)
			mn, merr := mem.TrimThrough(ctx, sub, seq)
			wn, werr := w.TrimThrough(ctx, sub, seq)
			require.NoError(t, merr, what)
			require.NoError(t, werr, what)
			require.Equal(t, mn, wn, what)
		case op < 14:
			max := uint64(rng.IntN(300))
			logf(t, "%s: trim %s to %d bytes", what, sub, max)
			mn, merr := mem.TrimToBytes(ctx, sub, max)
			wn, werr := w.TrimToBytes(ctx, sub, max)
			require.NoError(t, merr, what)
			require.NoError(t, werr, what)
			require.Equal(t, mn, wn, what)
		case op < 16:
			id := ids[rng.IntN(len(ids))]
			mm, merr := mem.Lookup(ctx, id)
			wm, werr := w.Lookup(ctx, id)
			require.Equal(t, merr, werr, "%s: lookup %q", what, id)
			requireSameMessage(t, mm, wm, what)
		case op < 19:
			mf, ml, _ := mem.Bounds(ctx, sub)
			wf, wl, _ := w.Bounds(ctx, sub)
			require.Equal(t, [2]uint64{mf, ml}, [2]uint64{wf, wl}, "%s: bounds of %q", what, sub)
			mb, _ := mem.Bytes(ctx, sub)
			wb, _ := w.Bytes(ctx, sub)
			require.Equal(t, mb, wb, "%s: bytes of %q", what, sub)
			mr, err := mem.Read(ctx, sub, 0, 0)
			require.NoError(t, err)
			wr, err := w.Read(ctx, sub, 0, 0)
			require.NoError(t, err)
			require.Len(t, wr, len(mr), what)
			for i := range mr {
				requireSameMessage(t, mr[i], wr[i], what)
			}
		default:
			logf(t, "%s: reopen", what)
			require.NoError(t, w.Close(ctx))
			w, err = Open(dir, opts)
			require.NoError(t, err, what)
		}
	}
}

func requireSameMessage(t *testing.T, a, b store.Message, what string) {
	t.Helper()
	require.Equal(t, a.Subject, b.Subject, what)
	require.Equal(t, a.Seq, b.Seq, what)
	require.Equal(t, a.ID, b.ID, what)
	require.True(t, a.Time.Equal(b.Time), "%s: time %v != %v", what, a.Time, b.Time)
	require.Equal(t, a.IdemKey, b.IdemKey, what)
	require.True(t, a.IdemExpires.Equal(b.IdemExpires), "%s: expiry %v != %v", what, a.IdemExpires, b.IdemExpires)
	require.Equal(t, string(a.Body), string(b.Body), what)
}

func logf(t *testing.T, format string, args ...any) {
	if testing.Verbose() {
		t.Logf(format, args...)
	}
}

// TestDifferentialMemoryRecords is TestDifferentialMemory for the other
// records: consumer progress (with floor raises and prunes), quarantine
// (replaced records, equal times), contracts and KV.
func TestDifferentialMemoryRecords(t *testing.T) {
	for seed := range uint64(15) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { differentialRecords(t, seed) })
	}
}

func differentialRecords(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 11))
	clock := base
	now := func() time.Time { return clock }
	mem := memory.New(&memory.Options{Now: now})
	defer mem.Close(ctx)
	dir := t.TempDir()
	opts := &Options{Sync: SyncNone, SegmentSize: 1024, CompactAfter: 16, Now: now}
	w, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { _ = w.Close(ctx) }()

	subjects := []string{"a", "a\x00b", "a%00b"}
	groups := []string{"g", "g\x00", "cursor:p", ""}
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for step := range 400 {
		op := rng.IntN(24)
		what := fmt.Sprintf("step %d op %d", step, op)
		clock = clock.Add(time.Duration(rng.IntN(3)) * time.Second)
		key := store.GroupKey{Subject: pick(subjects), Group: pick(groups)}
		seq := uint64(rng.IntN(12))
		switch {
		case op < 4:
			logf(t, "%s: done %q %d", what, key, seq)
			require.NoError(t, mem.MarkDone(ctx, key, seq))
			require.NoError(t, w.MarkDone(ctx, key, seq))
		case op < 6:
			n := rng.IntN(4)
			logf(t, "%s: attempt %q %d %d", what, key, seq, n)
			require.NoError(t, mem.MarkAttempt(ctx, key, seq, n))
			require.NoError(t, w.MarkAttempt(ctx, key, seq, n))
		case op < 7:
			seqs := []uint64{seq, seq + 2, seq + 1}
			require.NoError(t, mem.MarkDoneBatch(ctx, key, seqs))
			require.NoError(t, w.MarkDoneBatch(ctx, key, seqs))
		case op < 8:
			logf(t, "%s: raise %q %d", what, key, seq)
			require.NoError(t, mem.RaiseFloor(ctx, key, seq))
			require.NoError(t, w.RaiseFloor(ctx, key, seq))
		case op < 9:
			cut := clock.Add(-time.Duration(rng.IntN(20)) * time.Second)
			spare := pick(groups)
			keep := func(g string) bool { return g == spare }
			logf(t, "%s: prune %q before %v", what, key.Subject, cut.Sub(base))
			mn, merr := mem.PruneGroups(ctx, key.Subject, cut, keep)
			wn, werr := w.PruneGroups(ctx, key.Subject, cut, keep)
			require.NoError(t, merr)
			require.NoError(t, werr)
			require.Equal(t, mn, wn, what)
		case op < 12:
			mg, err := mem.LoadGroup(ctx, key)
			require.NoError(t, err)
			wg, err := w.LoadGroup(ctx, key)
			require.NoError(t, err)
			require.Equal(t, normGroup(mg), normGroup(wg), "%s: group %q", what, key)
			ml, err := mem.ListGroups(ctx, key.Subject, 0)
			require.NoError(t, err)
			wl, err := w.ListGroups(ctx, key.Subject, 0)
			require.NoError(t, err)
			require.Equal(t, len(ml), len(wl), what)
			for name, g := range ml {
				require.Equal(t, normGroup(g), normGroup(wl[name]), "%s: listed group %q", what, name)
			}
			ms, err := mem.ListGroupSubjects(ctx)
			require.NoError(t, err)
			ws, err := w.ListGroupSubjects(ctx)
			require.NoError(t, err)
			require.ElementsMatch(t, ms, ws, what)
		case op < 14:
			r := store.QuarantineRecord{ID: fmt.Sprint("q", rng.IntN(6)), Time: base.Add(time.Duration(rng.IntN(30)) * time.Second),
				Subject: key.Subject, Code: "C", Body: []byte(what), Released: rng.IntN(2) == 0}
			require.NoError(t, mem.PutQuarantine(ctx, r))
			require.NoError(t, w.PutQuarantine(ctx, r))
		case op < 16: // (the memory store trims no quarantine)
			since := base.Add(time.Duration(rng.IntN(30)) * time.Second)
			max := rng.IntN(4)
			ml, err := mem.ListQuarantine(ctx, since, max)
			require.NoError(t, err)
			wl, err := w.ListQuarantine(ctx, since, max)
			require.NoError(t, err)
			require.Equal(t, len(ml), len(wl), what)
			for i := range ml {
				require.Equal(t, ml[i].ID, wl[i].ID, what)
				require.Equal(t, string(ml[i].Body), string(wl[i].Body), what)
			}
		case op < 18:
			c := store.ContractRecord{ID: fmt.Sprint("c", rng.IntN(5)), Principal: "p", IssuedAt: clock,
				ExpiresAt: clock.Add(time.Duration(rng.IntN(20)) * time.Second), Revoked: rng.IntN(3) == 0, Body: []byte(what)}
			require.NoError(t, mem.PutContract(ctx, c))
			require.NoError(t, w.PutContract(ctx, c))
		case op < 19:
			mn, merr := mem.DeleteExpiredContracts(ctx, clock)
			wn, werr := w.DeleteExpiredContracts(ctx, clock)
			require.NoError(t, merr)
			require.NoError(t, werr)
			require.Equal(t, mn, wn, what)
			ml, err := mem.ListContracts(ctx, clock.Add(-5*time.Second))
			require.NoError(t, err)
			wl, err := w.ListContracts(ctx, clock.Add(-5*time.Second))
			require.NoError(t, err)
			require.Equal(t, len(ml), len(wl), what)
			for i := range ml {
				require.Equal(t, ml[i].ID, wl[i].ID, what)
				require.Equal(t, ml[i].Revoked, wl[i].Revoked, what)
				require.Equal(t, string(ml[i].Body), string(wl[i].Body), what)
			}
		case op < 21:
			b, k := pick(subjects), pick(groups)
			var v []byte
			if rng.IntN(3) > 0 {
				v = []byte(what)
			}
			if rng.IntN(4) == 0 {
				require.NoError(t, mem.Delete(ctx, b, k))
				require.NoError(t, w.Delete(ctx, b, k))
			} else {
				require.NoError(t, mem.Put(ctx, b, k, v))
				require.NoError(t, w.Put(ctx, b, k, v))
			}
			ml, err := mem.List(ctx, b)
			require.NoError(t, err)
			wl, err := w.List(ctx, b)
			require.NoError(t, err)
			require.Equal(t, len(ml), len(wl), what)
			for k, v := range ml {
				require.Equal(t, string(v), string(wl[k]), what)
			}
		default:
			logf(t, "%s: reopen", what)
			require.NoError(t, w.Close(ctx))
			w, err = Open(dir, opts)
			require.NoError(t, err, what)
		}
	}
}

// normGroup makes empty Done and Attempts compare equal to nil ones.
func normGroup(g store.GroupState) store.GroupState {
	if len(g.Done) == 0 {
		g.Done = nil
	}
	if len(g.Attempts) == 0 {
		g.Attempts = nil
	}
	return g
}
