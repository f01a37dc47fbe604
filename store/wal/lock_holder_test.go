package wal

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A second store on a held directory (a second `pigeon serve --data` on
// the same directory) is refused with an error that names the holder, so
// the operator knows which process to look at; the lock dies with its
// holder (a child process holding it: TestLockedByProcess). Before, the
// error said only "locked by another process".
func TestLockedNamesTheHolder(t *testing.T) {
	t.Run("same process", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, nil)
		_, err := Open(dir, nil)
		require.ErrorIs(t, err, store.ErrLocked)
		var le *LockedError
		require.ErrorAs(t, err, &le)
		require.Equal(t, s.Dir(), le.Dir)
		require.Equal(t, os.Getpid(), le.PID)
		require.Contains(t, err.Error(), fmt.Sprint("pid ", os.Getpid()))
	})
}
