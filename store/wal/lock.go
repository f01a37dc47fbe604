package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"pigeon/store"
)

// The directory lock keeps a second Store, in this process or another,
// off a data directory: it is a lock on the file LOCK, taken by lockFile
// (flock(2) on Linux, macOS and the BSDs, LockFileEx on Windows;
// elsewhere Open refuses rather than run unlocked) and released when its
// holder closes the store or dies.

// errLockHeld is lockFile's error when another holder has the lock.
var errLockHeld = errors.New("lock held")

// LockedError is Open's error when another Store, in this process or
// another, holds the directory (errors.Is(err, store.ErrLocked)). The
// lock is on the file LOCK (flock(2), or LockFileEx on Windows), which
// the system releases when its holder closes the store or dies.
type LockedError struct {
	Dir string
	PID int // the holder's process id as it wrote it in LOCK; 0 if unknown
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("wal: %s is held by pid %d: %v", e.Dir, e.PID, store.ErrLocked)
	}
	return fmt.Sprintf("wal: %s: %v", e.Dir, store.ErrLocked)
}

// Unwrap makes errors.Is(err, store.ErrLocked) hold.
func (e *LockedError) Unwrap() error { return store.ErrLocked }

// lockDir opens dir's LOCK, takes the lock without waiting and writes the
// holder's pid in it. A held lock is a *LockedError naming the holder.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, filePerm)
	if err != nil {
		return nil, fmt.Errorf("wal: data directory %s is not writable: %w", dir, err)
	}
	if err := lockFile(f); err != nil {
		defer f.Close()
		if errors.Is(err, errLockHeld) {
			return nil, &LockedError{Dir: dir, PID: lockHolder(f)}
		}
		return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	// Name the holder for a refused Open; only the lock counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// lockHolder reads the pid the holder wrote in LOCK, 0 if there is none
// (yet).
func lockHolder(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(b[:n]), "pid ")))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// unlock releases the lock and closes LOCK.
func unlock(f *os.File) {
	unlockFile(f)
	f.Close()
}
