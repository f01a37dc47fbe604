package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// testMarkAttemptRaises holds MarkAttempt to its contract: it only
// raises a sequence's count, to the larger of the attempt recorded and
// the one written, so that a write of attempt n landing after another
// writer recorded n+1 leaves n+1; one that raises nothing writes nothing
// (it does not count as a write for PruneGroups); of writes racing, the
// largest attempt stands, also across a reopen.
func (su *suite) testMarkAttemptRaises(t *testing.T) {
	ctx := t.Context()
	const seq = 4

	t.Run("Cases", func(t *testing.T) {
		s := su.store(t)
		for _, tc := range []struct {
			name   string
			writes []int // the attempts MarkAttempt records, in turn
			lower  [2]int
			after  []int // the attempts MarkAttempt records after lower
			want   int   // the attempt recorded (0: none, no group)
		}{
			{name: "raised", writes: []int{1, 2, 3}, want: 3},
			{name: "a lower attempt after a later one", writes: []int{1, 3, 2}, want: 3},
			{name: "the first attempt after a later one", writes: []int{2, 1}, want: 2},
			{name: "the same attempt again", writes: []int{2, 2}, want: 2},
			{name: "to none", writes: []int{2, 0}, want: 2},
			{name: "below none", writes: []int{2, -1}, want: 2},
			{name: "none at first", writes: []int{0}},
			{name: "below none at first", writes: []int{-3}},
			{name: "raised again after a lowering", writes: []int{3}, lower: [2]int{3, 2}, after: []int{3}, want: 3},
			{name: "a stale write after a lowering", writes: []int{3}, lower: [2]int{3, 1}, after: []int{2, 1}, want: 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := store.GroupKey{Subject: "a", Group: tc.name}
				for _, n := range tc.writes {
					require.NoError(t, s.MarkAttempt(ctx, key, seq, n), "MarkAttempt %d", n)
				}
				if tc.lower != [2]int{} {
					lw, ok := s.(store.AttemptLowerer)
					if !ok {
						t.Skip("the store cannot lower an attempt")
					}
					require.NoError(t, lw.LowerAttempt(ctx, key, seq, tc.lower[0], tc.lower[1]))
				}
				for _, n := range tc.after {
					require.NoError(t, s.MarkAttempt(ctx, key, seq, n), "MarkAttempt %d", n)
				}
				want := store.GroupState{}
				if tc.want > 0 {
					want.Attempts = map[uint64]int{seq: tc.want}
				}
				requireGroup(t, s, key, want)
			})
		}
	})

	t.Run("NoRaiseWritesNothing", func(t *testing.T) {
		s := su.store(t)
		gp, ok := s.(store.GroupPruner)
		if !ok {
			t.Skip("store does not implement store.GroupPruner")
		}
		key := func(g string) store.GroupKey { return store.GroupKey{Subject: "p", Group: g} }
		for _, g := range []string{"same", "lower", "raised", "done"} {
			require.NoError(t, s.MarkAttempt(ctx, key(g), seq, 3))
		}
		require.NoError(t, s.MarkDone(ctx, key("done"), seq))
		mark := between()
		require.NoError(t, s.MarkAttempt(ctx, key("same"), seq, 3))
		require.NoError(t, s.MarkAttempt(ctx, key("lower"), seq, 2))
		require.NoError(t, s.MarkAttempt(ctx, key("raised"), seq, 4))
		require.NoError(t, s.MarkAttempt(ctx, key("done"), seq, 5))
		n, err := gp.PruneGroups(ctx, "p", mark, func(string) bool { return false })
		require.NoError(t, err)
		require.Equal(t, 3, n, "a raise is a write; the same attempt, a lower one or one of a done sequence is not")
		requireGroup(t, s, key("raised"), store.GroupState{Attempts: map[uint64]int{seq: 4}})
		for _, g := range []string{"same", "lower", "done"} {
			requireGroup(t, s, key(g), store.GroupState{})
		}
	})

	t.Run("Racing", func(t *testing.T) {
		// Writers racing, each with an attempt of its own: the largest
		// stands, whatever order their writes land in.
		s := su.store(t)
		const racers = 8
		keys := make([]store.GroupKey, 4)
		for i := range keys {
			keys[i] = store.GroupKey{Subject: "r", Group: fmt.Sprint("g", i)}
		}
		var wg sync.WaitGroup
		errs := make([]error, racers*len(keys))
		start := make(chan struct{})
		for i := range racers {
			for j, key := range keys {
				wg.Go(func() {
					<-start
					errs[i*len(keys)+j] = s.MarkAttempt(ctx, key, seq, i+1)
				})
			}
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		want := store.GroupState{Attempts: map[uint64]int{seq: racers}}
		for _, key := range keys {
			requireGroup(t, s, key, want)
		}
		if su.f.Reopen == nil {
			return
		}
		require.NoError(t, s.MarkAttempt(ctx, keys[0], seq, 2), "a late write before the reopen")
		s = su.reopen(t, s)
		for _, key := range keys {
			requireGroup(t, s, key, want)
		}
		require.NoError(t, s.MarkAttempt(ctx, keys[0], seq, 3), "a late write after the reopen")
		requireGroup(t, s, keys[0], want)
	})
}
