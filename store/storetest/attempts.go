package storetest

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// testLowerAttempt holds a store.AttemptLowerer to its contract: an
// attempt is lowered only while the one recorded is the one the caller
// names, and otherwise nothing is written and the answer is an
// *store.AttemptChangedError (errors.Is store.ErrChanged); of lowerings
// racing from one attempt exactly one is made. A durable store keeps
// what the lowerings made, and only that, across a reopen.
func (su *suite) testLowerAttempt(t *testing.T) {
	s := su.store(t)
	if _, ok := s.(store.AttemptLowerer); !ok {
		t.Skip("the store cannot lower an attempt by compare-and-set")
	}
	ctx := t.Context()
	key := store.GroupKey{Subject: "a", Group: "g"}
	attemptOf := func(t *testing.T, s store.Store, seq uint64) int {
		t.Helper()
		g, err := s.LoadGroup(ctx, key)
		require.NoError(t, err)
		return g.Attempts[seq]
	}

	t.Run("Cases", func(t *testing.T) {
		for i, tc := range []struct {
			name     string
			recorded int  // the attempt MarkAttempt records first (0: none)
			done     bool // the sequence is marked done after it
			from, to int
			// changed: refused as another attempt recorded (found), or
			// the sequence done; invalid: refused as lowering nothing.
			changed bool
			found   int
			invalid bool
		}{
			{name: "lowered by one", recorded: 3, from: 3, to: 2},
			{name: "lowered to none", recorded: 1, from: 1, to: 0},
			{name: "lowered by more than one", recorded: 5, from: 5, to: 1},
			{name: "another attempt recorded", recorded: 4, from: 3, to: 2, changed: true, found: 4},
			{name: "a lower attempt recorded", recorded: 1, from: 3, to: 2, changed: true, found: 1},
			{name: "none recorded", from: 1, to: 0, changed: true},
			{name: "done", recorded: 2, done: true, from: 2, to: 1, changed: true},
			{name: "to the same attempt", recorded: 2, from: 2, to: 2, invalid: true},
			{name: "upwards", recorded: 2, from: 2, to: 3, invalid: true},
			{name: "below none", recorded: 2, from: 2, to: -1, invalid: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				seq := uint64(10 + i)
				if tc.recorded > 0 {
					require.NoError(t, s.MarkAttempt(ctx, key, seq, tc.recorded))
				}
				if tc.done {
					require.NoError(t, s.MarkDone(ctx, key, seq))
				}
				err := s.(store.AttemptLowerer).LowerAttempt(ctx, key, seq, tc.from, tc.to)
				switch {
				case tc.invalid:
					require.Error(t, err)
					require.NotErrorIs(t, err, store.ErrChanged, "a lowering that lowers nothing is refused for its arguments")
					require.Equal(t, tc.recorded, attemptOf(t, s, seq), "a refused lowering wrote")
				case tc.changed:
					require.ErrorIs(t, err, store.ErrChanged)
					var ce *store.AttemptChangedError
					require.True(t, errors.As(err, &ce), "%v is no *store.AttemptChangedError", err)
					require.Equal(t, store.AttemptChangedError{Seq: seq, From: tc.from, Found: tc.found, Done: tc.done}, *ce)
					if !tc.done {
						require.Equal(t, tc.recorded, attemptOf(t, s, seq), "a refused lowering wrote")
					}
				default:
					require.NoError(t, err)
					require.Equal(t, tc.to, attemptOf(t, s, seq))
				}
				g, err := s.LoadGroup(ctx, key)
				require.NoError(t, err)
				require.Equal(t, tc.done, g.IsDone(seq), "done")
			})
		}
	})

	t.Run("NothingWrittenForANewGroup", func(t *testing.T) {
		other := store.GroupKey{Subject: "a", Group: "never"}
		require.ErrorIs(t, s.(store.AttemptLowerer).LowerAttempt(ctx, other, 1, 1, 0), store.ErrChanged)
		requireGroup(t, s, other, store.GroupState{})
	})

	t.Run("AfterAnotherWrite", func(t *testing.T) {
		// One node read attempt 1 and gives it back; another recorded
		// attempt 2 first: its count stands.
		const seq = 100
		lw := s.(store.AttemptLowerer)
		require.NoError(t, s.MarkAttempt(ctx, key, seq, 1))
		require.NoError(t, s.MarkAttempt(ctx, key, seq, 2))
		require.ErrorIs(t, lw.LowerAttempt(ctx, key, seq, 1, 0), store.ErrChanged)
		require.Equal(t, 2, attemptOf(t, s, seq))
		require.NoError(t, lw.LowerAttempt(ctx, key, seq, 2, 1))
		require.ErrorIs(t, lw.LowerAttempt(ctx, key, seq, 2, 1), store.ErrChanged, "lowered twice from one attempt")
		require.Equal(t, 1, attemptOf(t, s, seq))
	})

	t.Run("Racing", func(t *testing.T) {
		// Lowerings racing from one attempt: exactly one is made.
		s := su.store(t)
		lw := s.(store.AttemptLowerer)
		const racers = 8
		const seq = 7
		require.NoError(t, s.MarkAttempt(ctx, key, seq, 5))
		var wg sync.WaitGroup
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				errs[i] = lw.LowerAttempt(ctx, key, seq, 5, 4)
			})
		}
		close(start)
		wg.Wait()
		made := 0
		for _, err := range errs {
			if err == nil {
				made++
				continue
			}
			require.ErrorIs(t, err, store.ErrChanged)
		}
		require.Equal(t, 1, made, "lowerings made from one attempt")
		require.Equal(t, 4, attemptOf(t, s, seq))
		if su.f.Reopen != nil {
			require.NoError(t, lw.LowerAttempt(ctx, key, seq, 4, 3))
			require.ErrorIs(t, lw.LowerAttempt(ctx, key, seq, 4, 2), store.ErrChanged)
			s = su.reopen(t, s)
			require.Equal(t, 3, attemptOf(t, s, seq), "a reopen replayed a lowering that was not made, or lost one that was")
			lw = s.(store.AttemptLowerer)
			require.ErrorIs(t, lw.LowerAttempt(ctx, key, seq, 4, 2), store.ErrChanged, "after a reopen")
			require.NoError(t, lw.LowerAttempt(ctx, key, seq, 3, 2), "after a reopen")
			require.Equal(t, 2, attemptOf(t, s, seq))
		}
	})
}
