//go:build !(unix && !aix && (!solaris || illumos)) && !windows

package wal

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// lockFile refuses: the store has no directory lock here (syscall has no
// flock(2) on Solaris and AIX, nor any lock on Plan 9, js and wasip1),
// and a store without one would let two processes write the
// same logs. Open fails rather than run unlocked.
func lockFile(*os.File) error {
	return fmt.Errorf("no directory lock on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// unlockFile has no lock to release.
func unlockFile(*os.File) {}
