//go:build !linux

package wal

import (
	"errors"
	"os"
)

// preallocate is Linux's; elsewhere segments grow as they are written.
func preallocate(*os.File, int64) error { return errors.ErrUnsupported }

// datasync is f.Sync (fsync) where fdatasync is not Linux's.
func datasync(f *os.File) error { return f.Sync() }
