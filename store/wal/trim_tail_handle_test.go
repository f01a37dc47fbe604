package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A trim into the tail segment has tidwall/wal remove that file and
// rename the rewritten rest in its place. Windows refuses to remove a file
// open through a handle that does not share deletion, as every handle Go
// opens is: the store's own handle on the tail (for fsync and
// preallocation) must be closed before the truncation, or the trim fails
// there and leaves the log unusable. Before, it was closed only after.
func TestTrimIntoTheTailHoldsNoHandleOnIt(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{Sync: SyncAlways}) // every append fsyncs through the tail's handle
	ms := appendN(t, s, "a", 1, 5)
	var checked, held bool
	s.faults.Store(&faults{truncate: func(w *logw) error {
		if w.name == "subject a" {
			checked, held = true, w.tailFile != nil
		}
		return nil
	}})
	n, err := s.TrimThrough(t.Context(), "a", 3)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.True(t, checked, "the subject's log was truncated")
	require.False(t, held, "the tail segment was open during its truncation")
	s.faults.Store(nil)

	ms = append(ms[3:], appendN(t, s, "a", 6, 2)...)
	require.Equal(t, ms, readAll(t, s, "a"))
	require.NoError(t, s.Close(t.Context()))
	s = open(t, dir, nil)
	require.Empty(t, s.Recovered())
	require.Equal(t, ms, readAll(t, s, "a"))
}
