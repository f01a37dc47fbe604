package memory_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return memory.New(nil) }, storetest.Features{})
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestNewDoesNotChangeOptions(t *testing.T) {
	opts := &memory.Options{IdempotencyGrace: -time.Second}
	memory.New(opts)
	require.Equal(t, -time.Second, opts.IdempotencyGrace)
}

func TestIdempotencyEntriesAreEvicted(t *testing.T) {
	const (
		n    = 100_000
		step = time.Millisecond
		ttl  = 50 * time.Millisecond
	)
	cases := []struct {
		name  string
		grace time.Duration
		limit int // live entries allowed: what the ttl and grace cover, plus one
	}{
		{"no grace", 0, int((ttl)/step) + 1},
		{"with grace", 20 * time.Millisecond, int((ttl+20*time.Millisecond)/step) + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := memory.New(&memory.Options{IdempotencyGrace: c.grace})
			ctx := t.Context()
			peak := 0
			for i := range n {
				now := t0.Add(time.Duration(i) * step)
				_, dup, err := s.Append(ctx, store.Message{
					Subject: "a", ID: "m" + strconv.Itoa(i), Time: now,
					IdemKey: "k" + strconv.Itoa(i), IdemExpires: now.Add(ttl),
				})
				if err != nil || dup {
					t.Fatalf("Append %d: dup %v, err %v", i, dup, err)
				}
				peak = max(peak, s.IdempotencyEntries())
			}
			require.LessOrEqual(t, peak, c.limit, "live idempotency entries must stay bounded")
			require.GreaterOrEqual(t, s.IdempotencyEntries(), int(ttl/step), "entries that have not expired are kept")

			// The newest keys still deduplicate.
			last := t0.Add((n - 1) * step)
			got, dup, err := s.Append(ctx, store.Message{
				Subject: "a", ID: "again", Time: last, IdemKey: "k" + strconv.Itoa(n-1), IdemExpires: last.Add(ttl),
			})
			require.NoError(t, err)
			require.True(t, dup)
			require.Equal(t, "m"+strconv.Itoa(n-1), got.ID)
		})
	}
}

func TestIdempotencyReclaimedKeyIsNotEvictedEarly(t *testing.T) {
	s := memory.New(nil)
	ctx := t.Context()
	appendKey := func(id string, at, ttl time.Duration) (store.Message, bool) {
		m, dup, err := s.Append(ctx, store.Message{
			Subject: "a", ID: id, Time: t0.Add(at), IdemKey: "k", IdemExpires: t0.Add(at + ttl),
		})
		require.NoError(t, err)
		return m, dup
	}
	_, dup := appendKey("m1", 0, 10*time.Second)
	require.False(t, dup)
	// Claimed again after expiry: the heap still holds the first expiry,
	// which this Append pops; it must not evict the new entry.
	_, dup = appendKey("m2", 20*time.Second, 10*time.Second)
	require.False(t, dup)
	require.Equal(t, 1, s.IdempotencyEntries())
	got, dup := appendKey("m3", 25*time.Second, 10*time.Second)
	require.True(t, dup)
	require.Equal(t, "m2", got.ID)
	// Expired entries go once a later message passes their expiry.
	_, dup = appendKey("m4", time.Hour, 0)
	require.False(t, dup)
	require.Zero(t, s.IdempotencyEntries())
}

func TestIdempotencyGraceToleratesLateMessages(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		name    string
		grace   time.Duration
		wantDup bool
	}{
		{"without grace the entry is gone", 0, false},
		{"grace keeps it for a late duplicate", time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := memory.New(&memory.Options{IdempotencyGrace: c.grace})
			_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(10 * time.Second)})
			require.NoError(t, err)
			// A message stamped later arrives first and moves the clock past
			// the expiry.
			_, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "m2", Time: t0.Add(11 * time.Second)})
			require.NoError(t, err)
			// A duplicate stamped before the expiry arrives late.
			_, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m3", Time: t0.Add(9 * time.Second), IdemKey: "k", IdemExpires: t0.Add(19 * time.Second)})
			require.NoError(t, err)
			require.Equal(t, c.wantDup, dup)
		})
	}
}

func TestTrimmedMessageStillDeduplicates(t *testing.T) {
	s := memory.New(nil)
	ctx := t.Context()
	orig, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	n, err := s.TrimBefore(ctx, "a", t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m2", Time: t0.Add(time.Minute), IdemKey: "k", IdemExpires: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, orig, got)
}

func TestIdempotencyEntriesAfterClose(t *testing.T) {
	s := memory.New(nil)
	_, _, err := s.Append(t.Context(), store.Message{Subject: "a", ID: "m1", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, s.IdempotencyEntries())
	require.NoError(t, s.Close(t.Context()))
	require.Zero(t, s.IdempotencyEntries())
}

// A key claimed again on another subject, at the same sequence there as the
// expired claim had, must not bring the old message back when its subject
// is trimmed.
func TestTrimKeepsOnlyTheCurrentClaim(t *testing.T) {
	s := memory.New(nil)
	ctx := t.Context()
	_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "old", Time: t0, IdemKey: "k", IdemExpires: t0.Add(time.Second)})
	require.NoError(t, err)
	_, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "new", Time: t0.Add(2 * time.Second), IdemKey: "k", IdemExpires: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.False(t, dup)
	n, err := s.TrimBefore(ctx, "a", t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "again", Time: t0.Add(3 * time.Second), IdemKey: "k", IdemExpires: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "new", got.ID)
}

// A progress write that changes nothing (MarkDone of a done sequence or of
// 0, MarkDoneBatch of those, MarkAttempt of a done sequence or of the
// attempt recorded) writes nothing, as store.GroupPruner says and store/wal
// does: a consumer repeating acks does not keep an abandoned group from
// being pruned, and MarkDone(0) leaves no empty group to list.
func TestNoOpProgressIsNotAWrite(t *testing.T) {
	ctx := t.Context()
	clock := t0
	s := memory.New(&memory.Options{Now: func() time.Time { return clock }})
	defer s.Close(ctx)
	g := store.GroupKey{Subject: "s", Group: "g"}
	require.NoError(t, s.MarkDone(ctx, g, 1))
	require.NoError(t, s.MarkAttempt(ctx, g, 3, 1))
	clock = clock.Add(time.Hour)
	require.NoError(t, s.MarkDone(ctx, g, 1))
	require.NoError(t, s.MarkDoneBatch(ctx, g, []uint64{1, 0}))
	require.NoError(t, s.MarkAttempt(ctx, g, 1, 2))
	require.NoError(t, s.MarkAttempt(ctx, g, 3, 1))
	require.NoError(t, s.MarkDone(ctx, store.GroupKey{Subject: "s", Group: "zero"}, 0))
	groups, err := s.ListGroups(ctx, "s", 0)
	require.NoError(t, err)
	require.Len(t, groups, 1, "MarkDone(0) makes no group")
	n, err := s.PruneGroups(ctx, "s", t0.Add(time.Minute), func(string) bool { return false })
	require.NoError(t, err)
	require.Equal(t, 1, n, "the group's last write that changed it is before the cut")
}
