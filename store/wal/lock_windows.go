//go:build windows

package wal

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockFile takes an exclusive LockFileEx lock on f without waiting;
// errLockHeld means another handle, in this process or another, holds
// it. Windows releases the lock when its holder closes f or dies.
//
// A Windows byte-range lock is mandatory: nobody else may read the bytes
// it covers. It therefore covers one byte far past the pid the holder
// writes at the start of LOCK (a range past the end of a file may be
// locked), so that a refused Open can still read that pid.
func lockFile(f *os.File) error {
	err := windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockRange())
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return errLockHeld
	}
	return err
}

// unlockFile releases the lock lockFile took.
func unlockFile(f *os.File) {
	_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockRange())
}

// lockRange places the locked byte at offset 1<<62 of LOCK.
func lockRange() *windows.Overlapped {
	return &windows.Overlapped{OffsetHigh: 1 << 30}
}
