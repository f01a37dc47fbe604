package jetstream

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// inParallel runs every item when none fails; after a failure it starts
// no other, and every item not run to success (the failed one, those not
// started) comes back, with the first failure.
func TestInParallel(t *testing.T) {
	items := make([]int, 100)
	for i := range items {
		items[i] = i
	}
	var ran atomic.Int64
	left, err := inParallel(items, 4, func(int) error { ran.Add(1); return nil })
	require.NoError(t, err)
	require.Empty(t, left)
	require.EqualValues(t, 100, ran.Load())

	boom := errors.New("boom")
	var ok atomic.Int64
	left, err = inParallel(items, 1, func(i int) error {
		if i == 10 {
			return boom
		}
		ok.Add(1)
		return nil
	})
	require.ErrorIs(t, err, boom)
	require.EqualValues(t, 10, ok.Load(), "one at a time: nothing after the failure starts")
	slices.Sort(left)
	require.Equal(t, items[10:], left)

	left, err = inParallel([]int(nil), 16, func(int) error { return boom })
	require.NoError(t, err)
	require.Empty(t, left)
}
