package jetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// idKeys counts the live keys of s's ids bucket.
func idKeys(t testing.TB, s *Store) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vals, _, err := s.values(ctx, s.ids, "")
	require.NoError(t, err)
	return len(vals)
}

// fill appends n messages to subject, ids named by prefix and a number,
// 16 at a time.
func fill(t testing.TB, s *Store, subject, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				if _, _, err := s.Append(ctx, store.Message{Subject: subject, ID: fmt.Sprintf("%s-%d", prefix, i), Time: now, Body: []byte("x")}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// BenchmarkTrimIDs is the cost of one trim of 10,000 messages (appended
// first, outside the timing), the ids bucket's entries freed with it:
//
//	go test -run '^$' -bench BenchmarkTrimIDs -benchtime 1x .
func BenchmarkTrimIDs(b *testing.B) {
	srv := runServer(b)
	for _, memory := range []bool{true, false} {
		b.Run(map[bool]string{true: "memory", false: "file"}[memory], func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s, err := Open(b.Context(), connect(b, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: memory})
				require.NoError(b, err)
				fill(b, s, "bench", "m", 10_000)
				b.StartTimer()
				n, err := s.TrimThrough(b.Context(), "bench", 10_000)
				b.StopTimer()
				require.NoError(b, err)
				require.Equal(b, 10_000, n)
				b.ReportMetric(float64(idKeys(b, s)), "ids-left")
				b.StartTimer()
			}
		})
	}
}

// TestTrimFreesEveryID: the <P>_ids bucket kept the entry of every
// message id ever stored: a trim freed only the entries of the messages
// it removed that were stored within 2×Options.Timeout and a minute, so
// on a long-running cluster with retention the bucket (disk, and the
// memory of its servers) grew with every message published. Nor did a
// trim free any entry when another trim of the subject (another node's
// sweep) purged a message while it read, or when its own cleanup failed
// after the purge. A trim now frees the entries of every message it
// removes, a step of trimChunk messages at a time; entries it could not
// free are freed by the next trim; an entry written since its message
// was trimmed (another append's claim of the id) stays.
func TestTrimFreesEveryID(t *testing.T) {
	srv := runServer(t)
	now := time.Now().UTC()
	// Timeout is how long an append waits for an entry's message: an hour
	// here, so that an entry the trim should have freed stalls a re-use
	// of its id past the test's deadline.
	open := func(t *testing.T, prefix string, timeout time.Duration) *Store {
		s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: timeout})
		require.NoError(t, err)
		return s
	}
	deadline := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	t.Run("every trimmed message's entry", func(t *testing.T) {
		s := open(t, freshPrefix(), time.Hour)
		ctx := deadline(t)
		fill(t, s, "a", "a", 2*trimChunk+500) // three steps
		fill(t, s, "b", "b", 10)
		n, err := s.TrimThrough(ctx, "a", 2*trimChunk)
		require.NoError(t, err)
		require.Equal(t, 2*trimChunk, n)
		require.Equal(t, 500+10, idKeys(t, s), "the retained messages' ids only")
		n, err = s.TrimBefore(ctx, "a", now.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, 500, n)
		require.Equal(t, 10, idKeys(t, s))

		// A trimmed id is free at once; a retained one is held.
		_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: "a-5", Time: now, Body: []byte("again")})
		require.NoError(t, err)
		got, err := s.Lookup(ctx, "a-5")
		require.NoError(t, err)
		require.Equal(t, "c", got.Subject)
		_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: "b-5", Time: now})
		require.ErrorIs(t, err, store.ErrExists)
		require.Equal(t, 11, idKeys(t, s))
	})

	t.Run("a cleanup cut short is finished by the next trim", func(t *testing.T) {
		s := open(t, freshPrefix(), time.Hour)
		fill(t, s, "a", "a", 50)
		fill(t, s, "b", "b", 2)
		ctx, cancel := context.WithCancel(deadline(t))
		s.trimPurged = cancel // the trim's caller gives up once the messages are purged
		_, err := s.TrimThrough(ctx, "a", 50)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 52, idKeys(t, s), "the entries are owed")
		s.trimPurged = nil

		n, err := s.TrimThrough(deadline(t), "b", 1)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, idKeys(t, s), "the next trim freed what was owed")
	})

	t.Run("another node trims the subject meanwhile", func(t *testing.T) {
		prefix := freshPrefix()
		a, b := open(t, prefix, time.Hour), open(t, prefix, time.Hour)
		fill(t, a, "a", "a", 100)
		ctx := deadline(t)
		first := true
		a.trimRead = func() {
			if !first {
				return
			}
			first = false
			// b's sweep purges the front while a reads, and an append
			// takes one of those ids (free at once): a must free the
			// others' entries, not the new claim.
			n, err := b.TrimThrough(ctx, "a", 40)
			require.NoError(t, err)
			require.Equal(t, 40, n)
			_, _, err = b.Append(ctx, store.Message{Subject: "c", ID: "a-3", Time: now, Body: []byte("new")})
			require.NoError(t, err)
		}
		_, err := a.TrimThrough(ctx, "a", 100)
		require.NoError(t, err)
		require.False(t, first)
		require.Equal(t, 1, idKeys(t, a), "only the new claim")
		got, err := a.Lookup(ctx, "a-3")
		require.NoError(t, err)
		require.Equal(t, "new", string(got.Body))
		_, _, err = a.Append(ctx, store.Message{Subject: "d", ID: "a-3", Time: now})
		require.ErrorIs(t, err, store.ErrExists)
		_, _, err = a.Append(ctx, store.Message{Subject: "d", ID: "a-77", Time: now})
		require.NoError(t, err, "freed at once")
	})

	t.Run("an append that takes an id over during the cleanup keeps it", func(t *testing.T) {
		prefix := freshPrefix()
		a := open(t, prefix, time.Hour)
		// b waits only briefly for a message that is gone.
		b := open(t, prefix, 50*time.Millisecond)
		fill(t, a, "a", "a", 20)
		ctx := deadline(t)
		a.trimPurged = func() {
			_, _, err := b.Append(ctx, store.Message{Subject: "c", ID: "a-7", Time: now, Body: []byte("new")})
			require.NoError(t, err)
		}
		n, err := a.TrimThrough(ctx, "a", 20)
		require.NoError(t, err)
		require.Equal(t, 20, n)
		require.Equal(t, 1, idKeys(t, a))
		got, err := a.Lookup(ctx, "a-7")
		require.NoError(t, err)
		require.Equal(t, "c", got.Subject)
		_, _, err = a.Append(ctx, store.Message{Subject: "d", ID: "a-7", Time: now})
		require.ErrorIs(t, err, store.ErrExists)
	})
}
