//go:build windows

package wal

import (
	"errors"
	"syscall"

	"golang.org/x/sys/windows"
)

// isNoSpace reports whether err is the file system's "no space left":
// Windows says ERROR_DISK_FULL or ERROR_HANDLE_DISK_FULL, which do not
// match syscall.ENOSPC (Go's stand-in for it there, which the store's
// fault tests inject).
func isNoSpace(err error) bool {
	return errors.Is(err, windows.ERROR_DISK_FULL) || errors.Is(err, windows.ERROR_HANDLE_DISK_FULL) ||
		errors.Is(err, syscall.ENOSPC)
}
