//go:build !linux

package wal

import (
	"errors"
	"os"
)

// preallocate is Linux's fallocate; elsewhere segments grow as they are
// written.
func preallocate(*os.File, int64) error { return errors.ErrUnsupported }
