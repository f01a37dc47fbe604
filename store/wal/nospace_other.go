//go:build !windows

package wal

import (
	"errors"
	"syscall"
)

// isNoSpace reports whether err is the file system's "no space left"
// (ENOSPC).
func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
