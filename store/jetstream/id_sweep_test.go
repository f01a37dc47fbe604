package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// later is a clock an hour ahead, past the age (2×Timeout and
// sweepGrace) at which the sweep takes an entry whose message is missing
// for one whose append is over.
func later() time.Time { return time.Now().Add(time.Hour) }

// sweepTimeout is the Options.Timeout of the stores of these tests: so
// long that an entry the sweep should have freed stalls a re-use of its
// id past the test's deadline, and short enough for later to age entries
// past 2×Timeout and sweepGrace.
const sweepTimeout = 20 * time.Minute

// sweepDeadline is the deadline of a test's calls: it only ends a stalled
// one; a prompt one is done well before it.
func sweepDeadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// purgeMessages removes every message of subject's stream behind the
// store's back, as a trim of a version that freed no ids entries did.
func purgeMessages(t *testing.T, s *Store, subject string) {
	t.Helper()
	st, err := s.stream(t.Context(), subject, false)
	require.NoError(t, err)
	require.NoError(t, st.Purge(t.Context()))
}

// TestIDSweepFreesLeftEntries: an ids entry that no trim frees stayed in
// the <P>_ids bucket for good: those a process owed when it ended (its
// trim's ctx ended after the purge, or no quorum), those past maxIDDebt,
// and those an older version left of every message it trimmed. The bucket
// grew over restarts and failures, and the first re-use of each such id
// waited 2×Timeout for an append long gone. A trim now runs a step of the
// ids sweep (when its process owes nothing), which frees an entry once
// the leaders show its message is gone and its append long over.
func TestIDSweepFreesLeftEntries(t *testing.T) {
	srv := runServer(t)
	now := time.Now().UTC()
	open := func(t *testing.T, prefix string) *Store {
		s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: sweepTimeout})
		require.NoError(t, err)
		return s
	}
	for _, tc := range []struct {
		name string
		// leave leaves the entries of ids on a store of prefix, which it
		// closes, and keeps one message of subject "keep".
		leave func(t *testing.T, prefix string) []string
	}{
		{"owed by a process that ended", func(t *testing.T, prefix string) []string {
			s := open(t, prefix)
			fill(t, s, "a", "a", 50)
			fill(t, s, "keep", "keep", 2)
			ctx, cancel := context.WithCancel(sweepDeadline(t))
			s.trimPurged = cancel // the trim's caller gives up once the messages are purged
			_, err := s.TrimThrough(ctx, "a", 50)
			require.ErrorIs(t, err, context.Canceled)
			require.NoError(t, s.Close(t.Context()))
			return []string{"a-0", "a-17", "a-49"}
		}},
		{"left by an older version's trim", func(t *testing.T, prefix string) []string {
			s := open(t, prefix)
			fill(t, s, "a", "a", 50)
			fill(t, s, "keep", "keep", 2)
			purgeMessages(t, s, "a")
			require.NoError(t, s.Close(t.Context()))
			return []string{"a-0", "a-17", "a-49"}
		}},
		{"naming a subject without a stream", func(t *testing.T, prefix string) []string {
			s := open(t, prefix)
			fill(t, s, "keep", "keep", 2)
			for _, id := range []string{"x", "y"} {
				_, err := s.ids.Create(t.Context(), token(id), []byte("never"))
				require.NoError(t, err)
			}
			require.NoError(t, s.Close(t.Context()))
			return []string{"x", "y"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := freshPrefix()
			ids := tc.leave(t, prefix)
			s := open(t, prefix)
			require.Greater(t, idKeys(t, s), 2, "entries left behind")
			s.sweep.now = later
			// The first trim of the process runs a step of the sweep.
			ctx := sweepDeadline(t)
			n, err := s.TrimThrough(ctx, "keep", 1)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, 1, idKeys(t, s), "only the retained message's entry")

			// Each freed id is taken at once (a left entry would stall the
			// append for 2×Timeout); the retained one is held.
			for _, id := range ids {
				_, _, err := s.Append(ctx, store.Message{Subject: "c", ID: id, Time: now, Body: []byte("again")})
				require.NoError(t, err, id)
				got, err := s.Lookup(ctx, id)
				require.NoError(t, err)
				require.Equal(t, "c", got.Subject)
			}
			kept, err := s.Read(ctx, "keep", 0, 0)
			require.NoError(t, err)
			require.Len(t, kept, 1)
			_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: kept[0].ID, Time: now})
			require.ErrorIs(t, err, store.ErrExists)
		})
	}
}

// TestIDSweepKeepsHeldIDs: the sweep never frees the entry of a message
// still held, whatever its age (that would let an append take the id of
// a held message: two messages under one id), nor the entry of an append
// that may still be under way (written less than 2×Timeout and sweepGrace
// ago, its message not stored yet), nor an entry the store did not write.
// A pass over more entries than a step reads (sweepChunk) frees the left
// ones of every step and keeps the held ones.
func TestIDSweepKeepsHeldIDs(t *testing.T) {
	srv := runServer(t)
	s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: sweepTimeout})
	require.NoError(t, err)
	ctx := sweepDeadline(t)
	now := time.Now().UTC()

	// Left entries before and after the held ones, so the pass's two
	// steps each free some: "old-*" of messages purged behind the store's
	// back, "gone-*" of a subject whose stream never was.
	fill(t, s, "old", "old", 20)
	purgeMessages(t, s, "old")
	fill(t, s, "a", "a", sweepChunk+100)
	for i := range 20 {
		_, err := s.ids.Create(ctx, token(fmt.Sprintf("gone-%d", i)), []byte("never"))
		require.NoError(t, err)
	}
	// An append under way: its id claimed, its message not stored yet.
	_, err = s.ids.Create(ctx, token("pending"), []byte("a"))
	require.NoError(t, err)
	// An entry the store did not write (its key is no token).
	_, err = s.ids.Create(ctx, "foreign", []byte("a"))
	require.NoError(t, err)
	held := sweepChunk + 100 + 2
	require.Equal(t, held+40, idKeys(t, s))

	// By the wall clock every entry is recent: none is freed, the
	// pending append's included.
	requireSweepsFreeNothing(t, ctx, s)
	require.Equal(t, held+40, idKeys(t, s))

	// An hour on, the left entries are freed, in two steps, the held
	// ones kept.
	s.sweep.now = later
	freed := 0
	for range 2 {
		n, err := s.sweepIDs(ctx)
		require.NoError(t, err)
		freed += n
	}
	require.Equal(t, 40+1, freed, "the left entries and the long-dead append's")
	require.Equal(t, held-1, idKeys(t, s))
	n, err := s.sweepIDs(ctx) // a new pass finds nothing more
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, held-1, idKeys(t, s))

	// Every held id still refuses a re-use as a duplicate, the first
	// and the last of the pass's steps included.
	for _, id := range []string{"a-0", "a-500", fmt.Sprintf("a-%d", sweepChunk+99)} {
		_, _, err := s.Append(ctx, store.Message{Subject: "c", ID: id, Time: now})
		require.ErrorIs(t, err, store.ErrExists, id)
		got, err := s.Lookup(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "a", got.Subject)
	}
	_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: "old-3", Time: now})
	require.NoError(t, err, "freed at once")
}

// TestIDSweepAsksTheLeaders: the sweep looks for an entry's message with
// a direct get, which a replica behind may answer "not found" while the
// message is stored (lagDirect stands in for it). Such an entry is read
// again from the leaders, which hold the message, and kept: freeing it
// would let an append take the id of a held message.
func TestIDSweepAsksTheLeaders(t *testing.T) {
	srv := runServer(t)
	prefix := freshPrefix()
	s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: sweepTimeout})
	require.NoError(t, err)
	ctx := sweepDeadline(t)
	fill(t, s, "a", "a", 20)
	lagDirect(t, s, s.msgStream("a"))
	_, err = s.find(ctx, "a", "a-3")
	require.ErrorIs(t, err, store.ErrNotFound, "the direct get is answered by the replica behind")

	s.sweep.now = later
	requireSweepsFreeNothing(t, ctx, s)
	require.Equal(t, 20, idKeys(t, s))
	got, err := s.Lookup(ctx, "a-3")
	require.NoError(t, err)
	require.Equal(t, "a", got.Subject)
	// Another node (its handle reads from the leader) is refused the id.
	b, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, _, err = b.Append(ctx, store.Message{Subject: "c", ID: "a-3", Time: time.Now().UTC()})
	require.ErrorIs(t, err, store.ErrExists)
}

// TestIDSweepLeavesARacingClaim: an append that takes over a left entry
// (or creates the id afresh) while the sweep frees that entry keeps its
// claim, whether its message goes to the subject the left entry named or
// another: the sweep purges the key only up to the revision it checked.
func TestIDSweepLeavesARacingClaim(t *testing.T) {
	srv := runServer(t)
	now := time.Now().UTC()
	for _, subject := range []string{"a", "c"} {
		t.Run("on "+subject, func(t *testing.T) {
			prefix := freshPrefix()
			s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: sweepTimeout})
			require.NoError(t, err)
			// b waits only briefly for the left entry's append.
			b, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: prefix, Memory: true, Timeout: 50 * time.Millisecond})
			require.NoError(t, err)
			ctx := sweepDeadline(t)
			fill(t, s, "a", "r", 1)
			purgeMessages(t, s, "a") // "r-0"'s entry is left

			// Between the sweep's checks of the left entry and its purge,
			// b takes the id over.
			var raced []string
			var appendErr error
			s.sweep.now = later
			s.sweep.checked = func(key string) {
				raced = append(raced, key)
				_, _, appendErr = b.Append(ctx, store.Message{Subject: subject, ID: "r-0", Time: now, Body: []byte("new")})
			}
			n, err := s.sweepIDs(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{token("r-0")}, raced)
			require.NoError(t, appendErr)
			require.Equal(t, 0, n, "the racing claim replaced the entry before the purge")
			require.Equal(t, 1, idKeys(t, s), "the racing claim stays")

			got, err := s.Lookup(ctx, "r-0")
			require.NoError(t, err)
			require.Equal(t, "new", string(got.Body))
			require.Equal(t, subject, got.Subject)
			_, _, err = s.Append(ctx, store.Message{Subject: "d", ID: "r-0", Time: now})
			require.ErrorIs(t, err, store.ErrExists, "the racing append's message holds its id")

			// The next passes keep it: its message is held.
			s.sweep.checked = nil
			requireSweepsFreeNothing(t, ctx, s)
			require.Equal(t, 1, idKeys(t, s))
		})
	}
}

// TestIDSweepResumesAfterAFailure: a step that fails part way (its ctx
// ends, as when the bucket has no quorum) frees nothing it has not
// checked, and the next step starts again where the failed one started,
// so the left entries of that stretch are not passed over until the next
// pass; after sweepRetries failed steps in a row it moves on (an entry
// whose reads keep failing would stop the sweep for good), and the next
// pass looks at them again.
func TestIDSweepResumesAfterAFailure(t *testing.T) {
	srv := runServer(t)
	total := sweepChunk + 10 // two steps
	for _, tc := range []struct {
		fails int
		// freed is what the step after the failed ones frees: the first
		// step's entries again, or the second's.
		freed int
	}{
		{1, sweepChunk},
		{sweepRetries - 1, sweepChunk},
		{sweepRetries, 10},
	} {
		t.Run(fmt.Sprintf("%d failed", tc.fails), func(t *testing.T) {
			s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: sweepTimeout})
			require.NoError(t, err)
			ctx := sweepDeadline(t)
			for i := range total {
				_, err := s.ids.Create(ctx, token(fmt.Sprintf("gone-%d", i)), []byte("never"))
				require.NoError(t, err)
			}
			s.sweep.now = later

			for range tc.fails {
				sctx, cancel := context.WithCancel(ctx)
				s.sweep.checked = func(string) { cancel() } // before the first purge
				n, err := s.sweepIDs(sctx)
				require.ErrorIs(t, err, context.Canceled)
				require.Zero(t, n)
			}
			s.sweep.checked = nil
			require.Equal(t, total, idKeys(t, s), "a failed step frees nothing")

			n, err := s.sweepIDs(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.freed, n)
			n, err = s.sweepIDs(ctx) // the rest, in this pass or the next
			require.NoError(t, err)
			require.Equal(t, total-tc.freed, n)
			require.Zero(t, idKeys(t, s))
		})
	}
}

// TestIDSweepAcrossLostQuorum: with two of three NATS nodes killed (no
// quorum for the ids bucket or the message streams), a step of the sweep
// fails, within Options.Timeout a request, and frees nothing; once the
// nodes are back, a step frees the left entries and keeps the held ones.
func TestIDSweepAcrossLostQuorum(t *testing.T) {
	c := startNATSCluster(t)
	ctx := t.Context()
	var s *Store
	require.Eventually(t, func() bool { // JetStream serves once the nodes agree on a meta leader
		var err error
		s, err = Connect(ctx, c.urls(0), &Options{Prefix: freshPrefix(), Replicas: 3, Timeout: 2 * time.Second},
			nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second))
		return err == nil
	}, 60*time.Second, 200*time.Millisecond)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	// A cluster just formed may take longer than Timeout to create its
	// first streams: create them before the appends, until that works.
	for _, subject := range []string{"a", "b"} {
		require.Eventually(t, func() bool { _, err := s.stream(ctx, subject, true); return err == nil }, 60*time.Second, 200*time.Millisecond)
	}
	fill(t, s, "a", "a", 20)
	fill(t, s, "b", "b", 20)
	purgeMessages(t, s, "b") // b's entries are left
	require.Equal(t, 40, idKeys(t, s))
	s.sweep.now = later

	c.nodes[1].kill()
	c.nodes[2].kill()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := s.sweepIDs(lctx)
	require.ErrorIs(t, err, store.ErrNoQuorum)
	require.Zero(t, n)

	c.start(t, c.nodes[1])
	c.start(t, c.nodes[2])
	// Steps fail until the streams have their leaders again. The entries
	// left are counted in the bucket, not by what the steps report: a
	// purge the client gave up on (its Timeout, on a busy machine) may
	// still have been applied, freeing an entry no step counts.
	require.Eventually(t, func() bool {
		if _, err := s.sweepIDs(ctx); err != nil {
			return false
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a watch may take a while too
		defer cancel()
		vals, _, err := s.values(wctx, s.ids, "")
		return err == nil && len(vals) == 20
	}, 120*time.Second, 200*time.Millisecond, "the held messages' entries alone")
	now := time.Now().UTC()
	for _, id := range []string{"a-0", "a-19"} {
		_, _, err := s.Append(ctx, store.Message{Subject: "c", ID: id, Time: now})
		require.ErrorIs(t, err, store.ErrExists, id)
	}
	_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: "b-7", Time: now})
	require.NoError(t, err, "freed at once")
}

// requireSweepsFreeNothing runs two steps of s's ids sweep (a whole pass
// and the start of the next) and requires that neither fails nor frees an
// entry.
func requireSweepsFreeNothing(t *testing.T, ctx context.Context, s *Store) {
	t.Helper()
	for range 2 {
		n, err := s.sweepIDs(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
}
