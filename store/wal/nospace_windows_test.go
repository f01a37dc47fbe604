package wal

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/windows"

	"pigeon/store"
)

// Windows reports a full disk as ERROR_DISK_FULL or ERROR_HANDLE_DISK_FULL,
// never as ENOSPC: both must become store.ErrFull, as ENOSPC does on Unix
// (TestErrorsAreDistinct).
func TestWriteErrorFullOnWindows(t *testing.T) {
	for _, errno := range []error{windows.ERROR_DISK_FULL, windows.ERROR_HANDLE_DISK_FULL} {
		err := writeError("x", fmt.Errorf("write: %w", errno))
		require.ErrorIs(t, err, store.ErrFull)
		require.ErrorIs(t, err, errno)
		err = closeError("x", fmt.Errorf("close: %w", errno))
		require.ErrorIs(t, err, store.ErrFull)
	}
}
