package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// message returns a message without idempotency key.
func message(subject, id string, t time.Time) store.Message {
	return store.Message{Subject: subject, ID: id, Time: t, Body: []byte("body of " + id)}
}

// appendAll appends ms in order, requires each to be stored and returns them
// as stored.
func appendAll(t *testing.T, s store.Store, ms ...store.Message) []store.Message {
	t.Helper()
	out := make([]store.Message, len(ms))
	for i, m := range ms {
		got, dup, err := s.Append(t.Context(), m)
		require.NoError(t, err, "Append %s", m.ID)
		require.False(t, dup, "Append %s reported a duplicate", m.ID)
		out[i] = got
	}
	return out
}

func requireBounds(t *testing.T, s store.Store, subject string, first, last uint64) {
	t.Helper()
	f, l, err := s.Bounds(t.Context(), subject)
	require.NoError(t, err, "Bounds %s", subject)
	require.Equal(t, [2]uint64{first, last}, [2]uint64{f, l}, "Bounds %s (first, last)", subject)
}

func requireRead(t *testing.T, s store.Store, subject string, from uint64, max int, want []store.Message) {
	t.Helper()
	got, err := s.Read(t.Context(), subject, from, max)
	require.NoError(t, err, "Read %s from %d max %d", subject, from, max)
	require.Equal(t, normMessages(want), normMessages(got), "Read %s from %d max %d", subject, from, max)
}

func requireNotFound(t *testing.T, s store.Store, id string) {
	t.Helper()
	_, err := s.Lookup(t.Context(), id)
	require.ErrorIs(t, err, store.ErrNotFound, "Lookup %s", id)
}

func (su *suite) testMessages(t *testing.T) {
	t.Run("SequencesPerSubject", func(t *testing.T) {
		s := su.store(t)
		appends := []struct {
			subject string
			seq     uint64
		}{{"a", 1}, {"b", 1}, {"a", 2}, {"a", 3}, {"b", 2}, {"c", 1}}
		var stored []store.Message
		for i, a := range appends {
			m := message(a.subject, fmt.Sprintf("m%d", i), at(time.Duration(i)*time.Second))
			got, dup, err := s.Append(t.Context(), m)
			require.NoError(t, err)
			require.False(t, dup)
			require.Equal(t, a.seq, got.Seq, "seq of append %d on %s", i, a.subject)
			m.Seq = a.seq
			require.Equal(t, normMessage(m), normMessage(got), "Append returns the message as stored")
			stored = append(stored, got)
		}
		requireBounds(t, s, "a", 1, 3)
		requireBounds(t, s, "b", 1, 2)
		requireBounds(t, s, "c", 1, 1)
		requireBounds(t, s, "never", 0, 0)
		requireRead(t, s, "a", 0, 0, []store.Message{stored[0], stored[2], stored[3]})
		requireRead(t, s, "b", 0, 0, []store.Message{stored[1], stored[4]})
	})

	t.Run("Read", func(t *testing.T) {
		s := su.store(t)
		var ms []store.Message
		for i := range 10 {
			ms = append(ms, message("orders", fmt.Sprintf("o%d", i+1), at(time.Duration(i)*time.Second)))
		}
		ms = appendAll(t, s, ms...)
		appendAll(t, s, message("other", "x1", base)) // must not show up
		seqs := func(from, to uint64) []store.Message { return ms[from-1 : to] }
		cases := []struct {
			name string
			from uint64
			max  int
			want []store.Message
		}{
			{"from 0 reads all", 0, 0, ms},
			{"from 1 reads all", 1, 0, ms},
			{"negative max is no limit", 1, -1, ms},
			{"max limits", 1, 3, seqs(1, 3)},
			{"from the middle", 5, 0, seqs(5, 10)},
			{"from the middle with max", 5, 2, seqs(5, 6)},
			{"max exactly the rest", 7, 4, seqs(7, 10)},
			{"max beyond the end", 8, 100, seqs(8, 10)},
			{"from 0 with max", 0, 2, seqs(1, 2)},
			{"last only", 10, 0, seqs(10, 10)},
			{"just past the last", 11, 0, nil},
			{"far past the last", 1 << 40, 5, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				requireRead(t, s, "orders", c.from, c.max, c.want)
			})
		}
		t.Run("unknown subject", func(t *testing.T) {
			requireRead(t, s, "unknown", 0, 0, nil)
		})
	})

	t.Run("Lookup", func(t *testing.T) {
		s := su.store(t)
		ms := appendAll(t, s,
			message("a", "id-1", base),
			message("b", "id-2", at(time.Second)),
			message("a", "id-3", at(2*time.Second)),
		)
		for _, m := range ms {
			got, err := s.Lookup(t.Context(), m.ID)
			require.NoError(t, err, "Lookup %s", m.ID)
			require.Equal(t, normMessage(m), normMessage(got))
		}
		requireNotFound(t, s, "id-4")
		requireNotFound(t, s, "")
	})

	t.Run("BodiesAreCopied", func(t *testing.T) {
		s := su.store(t)
		in := []store.Message{message("a", "m1", base), message("a", "m2", base)}
		want := []store.Message{message("a", "m1", base), message("a", "m2", base)}
		want[0].Seq, want[1].Seq = 1, 2
		appendAll(t, s, in...)
		in[0].Body[0] = 'X' // the caller reuses its buffer
		requireRead(t, s, "a", 0, 0, want)

		got, err := s.Read(t.Context(), "a", 0, 0)
		require.NoError(t, err)
		got[0].Body[0] = 'Y'
		_ = append(got[0].Body, "tail"...) // must not run into the next body
		require.Equal(t, want[1].Body, got[1].Body, "appending to one returned body changed the next")
		requireRead(t, s, "a", 0, 0, want)

		m, err := s.Lookup(t.Context(), "m2")
		require.NoError(t, err)
		m.Body[0] = 'Z'
		requireRead(t, s, "a", 0, 0, want)
	})
}

func (su *suite) testIdempotency(t *testing.T) {
	type step struct {
		subject string
		id      string
		key     string
		at      time.Duration // Time, from base
		ttl     time.Duration // IdemExpires - Time
		// wantDup is the id of the original the step must return as a
		// duplicate; empty when the step must be stored.
		wantDup string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"duplicate within ttl returns the original", []step{
			{"a", "m1", "k", 0, 10 * time.Second, ""},
			{"a", "m2", "k", 9 * time.Second, 10 * time.Second, "m1"},
			{"a", "m3", "k", 9*time.Second + 999*time.Millisecond, time.Second, "m1"},
		}},
		{"at expiry a new message is stored", []step{
			{"a", "m1", "k", 0, 10 * time.Second, ""},
			{"a", "m2", "k", 10 * time.Second, 10 * time.Second, ""},
			{"a", "m3", "k", 15 * time.Second, 10 * time.Second, "m2"},
		}},
		{"after expiry a new message is stored", []step{
			{"a", "m1", "k", 0, 10 * time.Second, ""},
			{"a", "m2", "k", time.Hour, 10 * time.Second, ""},
			{"a", "m3", "k", time.Hour + time.Second, 10 * time.Second, "m2"},
		}},
		{"a duplicate does not extend the entry", []step{
			{"a", "m1", "k", 0, 10 * time.Second, ""},
			{"a", "m2", "k", 5 * time.Second, 10 * time.Second, "m1"},
			{"a", "m3", "k", 12 * time.Second, 10 * time.Second, ""},
		}},
		{"different keys do not collide", []step{
			{"a", "m1", "k1", 0, time.Hour, ""},
			{"a", "m2", "k2", 0, time.Hour, ""},
			{"a", "m3", "k1", time.Second, time.Hour, "m1"},
			{"a", "m4", "k2", time.Second, time.Hour, "m2"},
		}},
		{"no key never deduplicates", []step{
			{"a", "m1", "", 0, time.Hour, ""},
			{"a", "m2", "", 0, time.Hour, ""},
		}},
		{"keys are global across subjects", []step{
			{"a", "m1", "k", 0, time.Hour, ""},
			{"b", "m2", "k", time.Second, time.Hour, "m1"},
			{"b", "m3", "other", time.Second, time.Hour, ""},
		}},
		{"an entry expired on arrival never deduplicates", []step{
			{"a", "m1", "k", 0, 0, ""},
			{"a", "m2", "k", 0, -time.Second, ""},
			{"a", "m3", "k", 0, time.Second, ""},
			{"a", "m4", "k", 0, time.Second, "m3"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := su.store(t)
			stored := map[string]store.Message{}
			count := map[string]uint64{}
			for _, st := range c.steps {
				m := message(st.subject, st.id, at(st.at))
				m.IdemKey = st.key
				m.IdemExpires = m.Time.Add(st.ttl)
				got, dup, err := s.Append(t.Context(), m)
				require.NoError(t, err, "Append %s", st.id)
				if st.wantDup != "" {
					require.True(t, dup, "Append %s must be a duplicate of %s", st.id, st.wantDup)
					require.Equal(t, normMessage(stored[st.wantDup]), normMessage(got), "Append %s returns the original", st.id)
					requireNotFound(t, s, st.id)
					continue
				}
				require.False(t, dup, "Append %s must be stored, got a duplicate of %s", st.id, got.ID)
				count[st.subject]++
				require.Equal(t, count[st.subject], got.Seq, "seq of %s", st.id)
				stored[st.id] = got
			}
			for subject, n := range count {
				requireBounds(t, s, subject, 1, n)
			}
		})
	}
}

func (su *suite) testConcurrency(t *testing.T) {
	t.Run("AppendsAreGaplessAndUnique", func(t *testing.T) {
		s := su.store(t)
		const workers, each = 8, 200
		subjects := []string{"a", "b", "c"}
		type result struct {
			m   store.Message
			err error
		}
		results := make([][]result, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					m := message(subjects[(w+i)%len(subjects)], fmt.Sprintf("w%d-%d", w, i), at(time.Duration(i)))
					got, dup, err := s.Append(t.Context(), m)
					if err == nil && dup {
						err = fmt.Errorf("append %s reported a duplicate", m.ID)
					}
					results[w] = append(results[w], result{got, err})
				}
			})
		}
		wg.Wait()

		bySubject := map[string]map[uint64]string{} // seq -> id, as Append returned
		for _, rs := range results {
			for _, r := range rs {
				require.NoError(t, r.err)
				seqs := bySubject[r.m.Subject]
				if seqs == nil {
					seqs = map[uint64]string{}
					bySubject[r.m.Subject] = seqs
				}
				prev, taken := seqs[r.m.Seq]
				require.False(t, taken, "%s seq %d given to %s and %s", r.m.Subject, r.m.Seq, prev, r.m.ID)
				seqs[r.m.Seq] = r.m.ID
			}
		}
		total := 0
		for _, subject := range subjects {
			seqs := bySubject[subject]
			n := uint64(len(seqs))
			total += len(seqs)
			requireBounds(t, s, subject, 1, n)
			got, err := s.Read(t.Context(), subject, 0, 0)
			require.NoError(t, err)
			require.Len(t, got, int(n))
			for i, m := range got {
				require.Equal(t, uint64(i+1), m.Seq, "%s: gap or disorder at index %d", subject, i)
				require.Equal(t, seqs[m.Seq], m.ID, "%s seq %d", subject, m.Seq)
			}
		}
		require.Equal(t, workers*each, total)
	})

	t.Run("OneWinnerPerIdempotencyKey", func(t *testing.T) {
		s := su.store(t)
		const workers, keys = 8, 40
		type result struct {
			id  string
			m   store.Message
			dup bool
			err error
		}
		results := make([][]result, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range keys {
					k := (i + w*5) % keys // each worker in another order
					m := message("pay", fmt.Sprintf("w%d-k%d", w, k), at(time.Duration(w)))
					m.IdemKey = fmt.Sprintf("key-%d", k)
					m.IdemExpires = at(time.Hour)
					got, dup, err := s.Append(t.Context(), m)
					results[w] = append(results[w], result{m.ID, got, dup, err})
				}
			})
		}
		wg.Wait()

		winners := map[string]store.Message{} // key -> stored
		for _, rs := range results {
			for _, r := range rs {
				require.NoError(t, r.err)
				if !r.dup {
					prev, taken := winners[r.m.IdemKey]
					require.False(t, taken, "%s stored twice: %s and %s", r.m.IdemKey, prev.ID, r.m.ID)
					winners[r.m.IdemKey] = r.m
				}
			}
		}
		require.Len(t, winners, keys, "every key has a winner")
		for _, rs := range results {
			for _, r := range rs {
				w := winners[r.m.IdemKey]
				require.Equal(t, w.ID, r.m.ID, "%s: every append of a key returns the winner", r.id)
				require.Equal(t, w.Seq, r.m.Seq)
				if r.dup {
					requireNotFound(t, s, r.id)
				}
			}
		}
		requireBounds(t, s, "pay", 1, keys)
	})
}

func (su *suite) testTrim(t *testing.T) {
	trimmer := func(t *testing.T) (store.Store, store.Trimmer) {
		s := su.store(t)
		tr, ok := s.(store.Trimmer)
		if !ok {
			t.Skip("store does not implement store.Trimmer")
		}
		return s, tr
	}

	t.Run("FromTheFront", func(t *testing.T) {
		s, tr := trimmer(t)
		ctx := t.Context()
		var ms []store.Message
		for i := range 10 {
			ms = append(ms, message("a", fmt.Sprintf("m%d", i+1), at(time.Duration(i)*time.Second)))
		}
		ms = appendAll(t, s, ms...)
		other := appendAll(t, s, message("b", "b1", base))

		n, err := tr.TrimBefore(ctx, "a", base)
		require.NoError(t, err)
		require.Zero(t, n, "nothing is before the first message")

		n, err = tr.TrimBefore(ctx, "a", at(4*time.Second))
		require.NoError(t, err)
		require.Equal(t, 4, n)
		requireBounds(t, s, "a", 5, 10)
		requireRead(t, s, "a", 0, 0, ms[4:])
		requireRead(t, s, "a", 2, 2, ms[4:6])
		requireRead(t, s, "a", 5, 1, ms[4:5])
		for _, m := range ms[:4] {
			requireNotFound(t, s, m.ID)
		}
		got, err := s.Lookup(ctx, "m5")
		require.NoError(t, err)
		require.Equal(t, normMessage(ms[4]), normMessage(got))

		n, err = tr.TrimBefore(ctx, "a", at(4*time.Second))
		require.NoError(t, err)
		require.Zero(t, n, "trimming again removes nothing")
		n, err = tr.TrimBefore(ctx, "unknown", at(time.Hour))
		require.NoError(t, err)
		require.Zero(t, n)

		requireBounds(t, s, "b", 1, 1)
		requireRead(t, s, "b", 0, 0, other)

		m11 := appendAll(t, s, message("a", "m11", at(10*time.Second)))[0]
		require.Equal(t, uint64(11), m11.Seq)

		n, err = tr.TrimBefore(ctx, "a", at(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 7, n)
		requireBounds(t, s, "a", 12, 11)
		requireRead(t, s, "a", 0, 0, nil)
		requireRead(t, s, "a", 11, 0, nil)
		requireNotFound(t, s, "m11")

		m12 := appendAll(t, s, message("a", "m12", at(time.Hour)))[0]
		require.Equal(t, uint64(12), m12.Seq, "sequences are never reused")
		requireBounds(t, s, "a", 12, 12)
		requireRead(t, s, "a", 0, 0, []store.Message{m12})
	})

	// A message trimmed while its idempotency key is live still answers a
	// retry within the key's TTL with the original (the policy promises
	// deduplication for the TTL, whatever retention keeps), also after a
	// reopen; once the key has expired, the retry is a new message.
	t.Run("KeepsLiveIdempotencyKeys", func(t *testing.T) {
		s, tr := trimmer(t)
		keyed := func(id string, sent time.Time) store.Message {
			m := message("a", id, sent)
			m.IdemKey, m.IdemExpires = "a/k", at(time.Hour)
			return m
		}
		orig := appendAll(t, s, keyed("m1", base), message("a", "m2", at(time.Second)))[0]
		n, err := tr.TrimBefore(t.Context(), "a", at(time.Second))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		requireNotFound(t, s, "m1")

		got, dup, err := s.Append(t.Context(), keyed("m1-retry", at(time.Minute)))
		require.NoError(t, err)
		require.True(t, dup, "the key is live: the retry is a duplicate of the trimmed original")
		require.Equal(t, normMessage(orig), normMessage(got))
		requireBounds(t, s, "a", 2, 2)

		if su.f.Reopen != nil {
			s = su.reopen(t, s)
			got, dup, err = s.Append(t.Context(), keyed("m1-reopened", at(2*time.Minute)))
			require.NoError(t, err)
			require.True(t, dup, "the key is live: after a reopen too, the retry is a duplicate of the trimmed original")
			require.Equal(t, normMessage(orig), normMessage(got))
			requireBounds(t, s, "a", 2, 2)
		}

		later := keyed("m1-late", at(2*time.Hour))
		later.IdemExpires = at(3 * time.Hour)
		got, dup, err = s.Append(t.Context(), later)
		require.NoError(t, err)
		require.False(t, dup, "the key expired: a new message")
		require.Equal(t, uint64(3), got.Seq)
	})

	t.Run("ThroughSequence", func(t *testing.T) {
		s := su.store(t)
		tr, ok := s.(store.SeqTrimmer)
		if !ok {
			t.Skip("store does not implement store.SeqTrimmer")
		}
		ctx := t.Context()
		var ms []store.Message
		for i := range 10 {
			// Newest first: a trim that went by time would cut elsewhere.
			ms = append(ms, message("a", fmt.Sprintf("m%d", i+1), at(time.Duration(10-i)*time.Second)))
		}
		ms = appendAll(t, s, ms...)
		other := appendAll(t, s, message("b", "b1", base))

		// requireKept checks that a holds exactly ms[first-1:].
		requireKept := func(t *testing.T, s store.Store, first uint64) {
			t.Helper()
			requireBounds(t, s, "a", first, 10)
			requireRead(t, s, "a", 0, 0, ms[first-1:])
			requireRead(t, s, "a", 1, 1, ms[first-1:first])
			for _, m := range ms[:first-1] {
				requireNotFound(t, s, m.ID)
			}
			got, err := s.Lookup(t.Context(), ms[first-1].ID)
			require.NoError(t, err)
			require.Equal(t, normMessage(ms[first-1]), normMessage(got))
			requireBounds(t, s, "b", 1, 1)
			requireRead(t, s, "b", 0, 0, other)
		}
		for _, c := range []struct {
			name  string
			seq   uint64
			n     int
			first uint64
		}{
			{"NothingThroughZero", 0, 0, 1},
			{"APrefix", 4, 4, 5},
			{"AgainNothing", 4, 0, 5},
			{"BelowTheFirstNothing", 2, 0, 5},
			{"One", 5, 1, 6},
		} {
			n, err := tr.TrimThrough(ctx, "a", c.seq)
			require.NoError(t, err, c.name)
			require.Equal(t, c.n, n, c.name)
			requireKept(t, s, c.first)
		}
		n, err := tr.TrimThrough(ctx, "unknown", 10)
		require.NoError(t, err)
		require.Zero(t, n)

		if su.f.Reopen != nil {
			s = su.reopen(t, s)
			tr = s.(store.SeqTrimmer)
			requireKept(t, s, 6)
		}
		m11 := appendAll(t, s, message("a", "m11", at(11*time.Second)))[0]
		require.Equal(t, uint64(11), m11.Seq)
		n, err = tr.TrimThrough(ctx, "a", 100)
		require.NoError(t, err)
		require.Equal(t, 6, n, "a sequence beyond the last removes every message")
		requireBounds(t, s, "a", 12, 11)
		requireRead(t, s, "a", 0, 0, nil)
		requireNotFound(t, s, "m11")
		m12 := appendAll(t, s, message("a", "m12", at(12*time.Second)))[0]
		require.Equal(t, uint64(12), m12.Seq, "sequences are never reused")
		if su.f.Reopen != nil {
			s = su.reopen(t, s)
		}
		requireBounds(t, s, "a", 12, 12)
		requireRead(t, s, "a", 0, 0, []store.Message{m12})
	})

	t.Run("ToBytes", su.testTrimToBytes)

	t.Run("StopsAtTheFirstMessageNotBefore", func(t *testing.T) {
		s, tr := trimmer(t)
		offsets := []time.Duration{1, 2, 5, 3, 6} // out of order, as concurrent publishers can be
		var ms []store.Message
		for i, d := range offsets {
			ms = append(ms, message("a", fmt.Sprintf("m%d", i+1), at(d*time.Second)))
		}
		ms = appendAll(t, s, ms...)
		n, err := tr.TrimBefore(t.Context(), "a", at(4*time.Second))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		requireBounds(t, s, "a", 3, 5)
		requireRead(t, s, "a", 0, 0, ms[2:])
	})
}

// sized returns a message of subject "a" without idempotency key whose
// body is n bytes.
func sized(id string, n int, t time.Time) store.Message {
	return store.Message{Subject: "a", ID: id, Time: t, Body: []byte(strings.Repeat("x", n))}
}

// testTrimToBytes checks store.ByteTrimmer: Bytes is the sum of the
// retained bodies' lengths, kept through appends, trims and a reopen
// (of messages appended with their acceptance records too); TrimToBytes
// removes the fewest oldest messages that bring it to at most max, by
// size alone, never reusing a sequence; a trimmed message's live
// idempotency key still answers a retry with it.
func (su *suite) testTrimToBytes(t *testing.T) {
	s := su.store(t)
	bt, ok := s.(store.ByteTrimmer)
	if !ok {
		t.Skip("store does not implement store.ByteTrimmer")
	}
	ctx := t.Context()
	requireBytes := func(t *testing.T, bt store.ByteTrimmer, subject string, want uint64) {
		t.Helper()
		got, err := bt.Bytes(ctx, subject)
		require.NoError(t, err)
		require.Equal(t, want, got, "Bytes %s", subject)
	}
	requireBytes(t, bt, "a", 0)
	n, err := bt.TrimToBytes(ctx, "a", 0)
	require.NoError(t, err)
	require.Zero(t, n, "an unknown subject has nothing to trim")

	// Newest first, and the largest first: a trim that went by time, or
	// by count, would cut elsewhere.
	keyed := sized("m1", 10, at(5*time.Second))
	keyed.IdemKey, keyed.IdemExpires = "a/k", at(time.Hour)
	ms := appendAll(t, s, keyed, sized("m2", 20, at(4*time.Second)), sized("m3", 30, at(3*time.Second)),
		sized("m4", 40, at(2*time.Second)), sized("m5", 50, at(time.Second)))
	other := appendAll(t, s, store.Message{Subject: "b", ID: "b1", Time: base, Body: []byte("seven b")})
	requireBytes(t, bt, "a", 150)
	requireBytes(t, bt, "b", 7)

	requireKept := func(t *testing.T, s store.Store, first uint64, bytes uint64) {
		t.Helper()
		requireBounds(t, s, "a", first, 5)
		requireRead(t, s, "a", 0, 0, ms[first-1:])
		for _, m := range ms[:first-1] {
			requireNotFound(t, s, m.ID)
		}
		requireBytes(t, s.(store.ByteTrimmer), "a", bytes)
		requireBounds(t, s, "b", 1, 1)
		requireRead(t, s, "b", 0, 0, other)
		requireBytes(t, s.(store.ByteTrimmer), "b", 7)
	}
	for _, c := range []struct {
		name  string
		max   uint64
		n     int
		first uint64
		bytes uint64
	}{
		{"AtTheBoundNothing", 150, 0, 1, 150},
		{"OneByteOverOne", 149, 1, 2, 140},
		{"AsFewAsBringItUnder", 100, 2, 4, 90},
		{"AgainNothing", 90, 0, 4, 90},
	} {
		n, err := bt.TrimToBytes(ctx, "a", c.max)
		require.NoError(t, err, c.name)
		require.Equal(t, c.n, n, c.name)
		requireKept(t, s, c.first, c.bytes)
	}

	// m1 went with its key live: a retry is still its duplicate.
	retry := sized("m1-retry", 10, at(time.Minute))
	retry.IdemKey, retry.IdemExpires = "a/k", at(2*time.Hour)
	got, dup, err := s.Append(ctx, retry)
	require.NoError(t, err)
	require.True(t, dup, "the key is live: the retry is a duplicate of the trimmed original")
	require.Equal(t, normMessage(ms[0]), normMessage(got))
	requireKept(t, s, 4, 90)

	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		requireKept(t, s, 4, 90)
	}
	bt = s.(store.ByteTrimmer)
	m6 := sized("m6", 60, at(6*time.Second))
	if aa, ok := s.(store.AcceptAppender); ok {
		m6, _, err = aa.AppendAccepted(ctx, m6, store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Principal: "p", Time: m6.Time})
		require.NoError(t, err)
	} else {
		m6 = appendAll(t, s, m6)[0]
	}
	require.Equal(t, uint64(6), m6.Seq)
	requireBytes(t, bt, "a", 150)
	if su.f.Reopen != nil {
		s = su.reopen(t, s)
		bt = s.(store.ByteTrimmer)
		requireBytes(t, bt, "a", 150)
	}
	n, err = bt.TrimToBytes(ctx, "a", 0)
	require.NoError(t, err)
	require.Equal(t, 3, n, "a bound of 0 removes every message")
	requireBounds(t, s, "a", 7, 6)
	requireRead(t, s, "a", 0, 0, nil)
	requireNotFound(t, s, "m6")
	requireBytes(t, bt, "a", 0)
	m7 := appendAll(t, s, sized("m7", 5, at(7*time.Second)))[0]
	require.Equal(t, uint64(7), m7.Seq, "sequences are never reused")
	requireBytes(t, bt, "a", 5)
	requireBytes(t, bt, "b", 7)
}
