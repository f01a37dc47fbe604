package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The clean-shutdown marker. Close writes the file CLEAN once every log
// has been flushed and closed without error; Open reads it, recovers, and
// removes it (durably) before it returns, so before any write. While the
// store is open, and after a crash, there is no marker.
//
// With the marker, every log ended on a whole record when the store was
// closed, so a bad tail is damage like any other and Open refuses it
// (*store.CorruptError); without it (a crash, or a directory written
// before the marker existed) a torn tail is the write the crash cut short,
// and Open drops it. Only the file's presence counts; its text is for the
// operator.

func cleanPath(dir string) string { return filepath.Join(dir, "CLEAN") }

// readClean reports whether dir holds the marker, and removes what a crash
// while writing it may have left (CLEAN.tmp, which does not count).
func readClean(dir string) (bool, error) {
	p := cleanPath(dir)
	if err := os.Remove(p + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	_, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// writeClean records a clean shutdown durably.
func writeClean(dir string, now time.Time) error {
	text := fmt.Sprintf("pigeon store/wal clean shutdown\nformat 1\ntime %s\n", now.UTC().Format(time.RFC3339Nano))
	return writeFileAtomic(cleanPath(dir), []byte(text))
}

// removeClean removes the marker durably: once it returns, a crash is
// never mistaken for a clean shutdown.
func removeClean(dir string) error {
	if err := os.Remove(cleanPath(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

// maxCleanStamp bounds how much of the marker cleanStamp reads; the text
// writeClean writes is far shorter.
const maxCleanStamp = 4096

// cleanStamp returns the marker's text (its first maxCleanStamp bytes), or
// "" when there is none. The offline tools compare it before and after
// they read: the same text means no store had the directory open in
// between. A marker that is not a regular file (a named pipe, which a
// plain open would wait on, or a device that never ends) is not read; it
// counts by its presence, as it does for Open.
func cleanStamp(dir string) string {
	f, _, err := openRegular(cleanPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		return "unreadable marker: " + err.Error()
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxCleanStamp))
	return string(b)
}
