// Package regfile opens files that must be regular files without waiting
// on anything else put in their place: a named pipe would hold an open
// until a writer came, and a device such as /dev/zero would be read until
// memory ran out. The store, the policy loader and the CLI read files an
// attacker may have replaced through it.
//
// Its functions are safe for concurrent use.
package regfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is the cause of Open's error for a path that is not a
// regular file (links followed). Test it with errors.Is.
var ErrNotRegular = errors.New("not a regular file")

// OpenNonblocking opens path for reading without blocking: a named pipe
// opens at once instead of waiting for a writer. It does not look at
// what path is; Open does.
func OpenNonblocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// Open opens path for reading without blocking and returns it with its
// FileInfo, refusing whatever is not a regular file with an error that
// wraps ErrNotRegular and names the path and its mode.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := OpenNonblocking(path)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w (mode %s)", path, ErrNotRegular, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}
