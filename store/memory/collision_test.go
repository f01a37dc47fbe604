package memory

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// These tests narrow the hash of the id and idempotency key indexes so that
// strings collide, and check that nothing a caller can see changes: the
// store must never rely on two strings having different hashes.

// colliding returns a store whose index hashes keep only the bits of mask:
// 0 makes every string collide with every other.
func colliding(opts *Options, mask uint64) *Store {
	s := New(opts)
	s.msgs.hash.mask = mask
	return s
}

func TestCollidingKeys(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := colliding(nil, 0)
	add := func(subject, id, key string, d, ttl time.Duration) (store.Message, bool) {
		t.Helper()
		m, dup, err := s.Append(ctx, store.Message{Subject: subject, ID: id, Time: at(d), IdemKey: key, IdemExpires: at(d + ttl), Body: []byte("body of " + id)})
		require.NoError(t, err)
		return m, dup
	}
	lookup := func(id string) string {
		t.Helper()
		m, err := s.Lookup(ctx, id)
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
			return ""
		}
		require.Equal(t, id, m.ID)
		require.Equal(t, "body of "+id, string(m.Body))
		return m.Subject + "/" + strconv.FormatUint(m.Seq, 10)
	}

	// Three keys and ids, one hash: the first of each goes by hash, the
	// others to overflow, and each still finds its own.
	for i, k := range []string{"k1", "k2", "k3"} {
		_, dup := add("a", "m"+k, k, time.Duration(i)*time.Second, 10*time.Second)
		require.False(t, dup, k)
	}
	require.Equal(t, 1, s.msgs.ids.byHash.Len())
	require.Len(t, s.msgs.ids.overflow, 2)
	require.Len(t, s.msgs.idem.keys.overflow, 2)
	require.Equal(t, 3, s.IdempotencyEntries())
	for i, k := range []string{"k1", "k2", "k3"} {
		got, dup := add("b", "again-"+k, k, 3*time.Second, time.Hour)
		require.True(t, dup, k)
		require.Equal(t, "m"+k, got.ID)
		require.Equal(t, "a/"+strconv.Itoa(i+1), lookup("m"+k))
	}
	require.Empty(t, lookup("again-k1"), "a duplicate is not stored")
	require.Empty(t, lookup("mk4"))

	// The same id again: Lookup finds the later message, wherever the id
	// is indexed.
	add("b", "mk2", "", 4*time.Second, 0)
	require.Equal(t, "b/1", lookup("mk2"))
	require.Len(t, s.msgs.ids.overflow, 2)

	// Trimming the message indexed by hash leaves the others findable; its
	// key still deduplicates from the kept copy.
	n, err := s.TrimBefore(ctx, "a", at(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, lookup("mk1"))
	require.Equal(t, "a/3", lookup("mk3"))
	require.Len(t, s.msgs.idem.kept, 1)
	got, dup := add("b", "x", "k1", 5*time.Second, time.Hour)
	require.True(t, dup)
	require.Equal(t, "mk1", got.ID)
	require.Equal(t, "body of mk1", string(got.Body))

	// The hash is free now: a new id takes it, and the old ones in
	// overflow are still found.
	add("b", "mk5", "", 5*time.Second, 0)
	require.Equal(t, "b/2", lookup("mk5"))
	require.Equal(t, "a/3", lookup("mk3"))
	require.Equal(t, "b/1", lookup("mk2"))

	// At 11s k1 (expired at 10s) is claimed again, which drops its kept
	// copy, and k2 (expiring at 11s) is evicted; k3 lives until 12s.
	got, dup = add("b", "mk6", "k1", 11*time.Second, time.Hour)
	require.False(t, dup, "k1 expired at 10s")
	require.Equal(t, "mk6", got.ID)
	require.Empty(t, s.msgs.idem.kept)
	require.Equal(t, 2, s.IdempotencyEntries(), "k1 claimed again, k2 evicted at 11s")
	_, dup = add("b", "mk7", "k3", 11*time.Second, time.Hour)
	require.True(t, dup)
	_, dup = add("b", "mk8", "k2", 11*time.Second, time.Hour)
	require.False(t, dup, "k2 expired at 11s")
	_, dup = add("b", "mk9", "", 13*time.Second, 0)
	require.False(t, dup)
	require.Equal(t, 2, s.IdempotencyEntries(), "k3 evicted at 13s")
	_, dup = add("b", "mk10", "k3", 13*time.Second, time.Hour)
	require.False(t, dup)
	for _, k := range []string{"k1", "k2", "k3"} {
		_, dup = add("c", "y"+k, k, 14*time.Second, time.Hour)
		require.True(t, dup, k)
	}

	// Trimming everything drops every id, in either map.
	for _, subject := range []string{"a", "b"} {
		_, err = s.TrimBefore(ctx, subject, at(time.Hour))
		require.NoError(t, err)
	}
	require.Zero(t, s.msgs.ids.len())
	require.Len(t, s.msgs.idem.kept, 3, "the three live keys keep their messages")
}

// TestCollisionsChangeNothing runs random operations against stores whose
// hashes collide more or less, and requires every answer to be the one the
// store with full hashes gives.
func TestCollisionsChangeNothing(t *testing.T) {
	for _, grace := range []time.Duration{0, 3 * time.Second} {
		for seed := range uint64(4) {
			t.Run(fmt.Sprintf("grace=%v/seed=%d", grace, seed), func(t *testing.T) {
				ops := randomOps(rand.New(rand.NewPCG(seed, 1)), 3000)
				want := runOps(t, New(&Options{IdempotencyGrace: grace}), ops)
				for _, mask := range []uint64{0, 1, 0xf} {
					s := colliding(&Options{IdempotencyGrace: grace}, mask)
					got := runOps(t, s, ops)
					for i := range want {
						require.Equal(t, want[i], got[i], "mask %#x: op %d %+v", mask, i, ops[i])
					}
				}
			})
		}
	}
}

type randomOp struct {
	kind    string // append, lookup, read, trim
	subject string
	id      string
	key     string
	at      time.Duration // from t0
	ttl     time.Duration
	from    uint64
	max     int
}

func randomOps(r *rand.Rand, n int) []randomOp {
	subjects := []string{"a", "b", "c"}
	var clock time.Duration
	ops := make([]randomOp, n)
	for i := range ops {
		o := randomOp{subject: subjects[r.IntN(len(subjects))], id: "m" + strconv.Itoa(r.IntN(40))}
		switch p := r.IntN(100); {
		case p < 70:
			o.kind = "append"
			clock += time.Duration(r.IntN(3000)) * time.Millisecond
			o.at = clock
			if r.IntN(10) == 0 {
				o.at -= time.Duration(r.IntN(5000)) * time.Millisecond // late
			}
			if r.IntN(10) > 3 {
				o.key = "k" + strconv.Itoa(r.IntN(12))
				if r.IntN(2) == 0 { // scoped as the broker scopes keys (keyScopes)
					o.key = o.subject + "\x00p" + strconv.Itoa(r.IntN(2)) + "\x00" + o.key
				}
			}
			if r.IntN(20) == 0 {
				o.id = ""
			}
			o.ttl = []time.Duration{-time.Second, 0, time.Second, 5 * time.Second, 20 * time.Second}[r.IntN(5)]
		case p < 85:
			o.kind = "lookup"
		case p < 95:
			o.kind = "read"
			o.from, o.max = uint64(r.IntN(1200)), r.IntN(8)-1
		default:
			o.kind = "trim"
			o.at = clock - time.Duration(r.IntN(30))*time.Second
		}
		ops[i] = o
	}
	return ops
}

// runOps runs ops on s and returns what each returned, and how many
// idempotency entries s held after it.
func runOps(t *testing.T, s *Store, ops []randomOp) []any {
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]any, len(ops))
	for i, o := range ops {
		var r []any
		switch o.kind {
		case "append":
			now := t0.Add(o.at)
			m, dup, err := s.Append(ctx, store.Message{
				Subject: o.subject, ID: o.id, Time: now, IdemKey: o.key, IdemExpires: now.Add(o.ttl),
				Body: []byte(o.id + "@" + strconv.Itoa(i)),
			})
			r = []any{m, dup, err}
		case "lookup":
			m, err := s.Lookup(ctx, o.id)
			r = []any{m, err}
		case "read":
			ms, err := s.Read(ctx, o.subject, o.from, o.max)
			r = []any{ms, err}
		case "trim":
			n, err := s.TrimBefore(ctx, o.subject, t0.Add(o.at))
			r = []any{n, err}
		}
		out[i] = append(r, s.IdempotencyEntries())
	}
	return out
}

// TestLocationsPastThePackedRange: the hash indexes hold a location packed
// in one word; a message whose sequence does not fit is indexed by its
// string instead, and nothing a caller can see changes as a subject's
// sequences cross the bound: ids are found and replaced, keys deduplicate
// and expire, and trimmed messages leave the indexes.
func TestLocationsPastThePackedRange(t *testing.T) {
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := New(nil)
	first := uint64(1)<<seqBits - 2
	s.msgs.subject("a").first = first // as if 2^40 - 3 messages had come and gone
	add := func(id, key string, d time.Duration) (store.Message, bool) {
		t.Helper()
		m, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: id, Time: t0.Add(d), IdemKey: key, IdemExpires: t0.Add(d + 10*time.Second), Body: []byte(id)})
		require.NoError(t, err)
		return m, dup
	}
	seqOf := func(id string) uint64 {
		t.Helper()
		m, err := s.Lookup(ctx, id)
		if err != nil {
			require.ErrorIs(t, err, store.ErrNotFound)
			return 0
		}
		require.Equal(t, id, string(m.Body))
		return m.Seq
	}
	for i := range 4 { // sequences 2^40-2 .. 2^40+1: two packed, two not
		m, dup := add("m"+strconv.Itoa(i), "k"+strconv.Itoa(i), 0)
		require.False(t, dup)
		require.Equal(t, first+uint64(i), m.Seq)
	}
	require.Len(t, s.msgs.ids.overflow, 2, "the last two go by string")
	require.Len(t, s.msgs.idem.keys.overflow, 2)
	for i := range 4 {
		require.Equal(t, first+uint64(i), seqOf("m"+strconv.Itoa(i)))
		orig, dup := add("other", "k"+strconv.Itoa(i), time.Second)
		require.True(t, dup, "key %d", i)
		require.Equal(t, "m"+strconv.Itoa(i), orig.ID)
	}

	// An id appended again past the bound moves to overflow, and back into
	// the hash index from there is never needed: sequences only grow.
	add("m0", "", 2*time.Second)
	require.Equal(t, first+4, seqOf("m0"))
	require.Equal(t, 1, s.msgs.ids.byHash.Len(), "m1 only")
	require.Len(t, s.msgs.ids.overflow, 3)

	// Trimmed, the messages leave the id index; their keys deduplicate
	// until they expire, then leave too.
	n, err := s.TrimThrough(ctx, "a", first+4)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	for i := range 4 {
		require.Zero(t, seqOf("m"+strconv.Itoa(i)))
	}
	require.Zero(t, s.msgs.ids.len())
	_, dup := add("late", "k3", 3*time.Second)
	require.True(t, dup, "a trimmed message's key still deduplicates")
	add("later", "", time.Hour)
	require.Zero(t, s.IdempotencyEntries(), "expired")
	require.Empty(t, s.msgs.idem.keys.overflow)
	require.Empty(t, s.msgs.idem.kept)
	require.Equal(t, uint64(1)<<seqBits+3, seqOf("later"))
}
