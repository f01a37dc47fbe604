package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"pigeon/internal/regfile"
)

// MaxFileSize bounds a policy or schema file: 8 MiB, some hundred times
// the largest catalog file a broker is known to hold. A larger file is an
// *Error wrapping a *FileTooLargeError, and is not read past the bound.
const MaxFileSize = 8 << 20

// ErrNotRegularFile is the cause of the *Error for a catalog file that is
// not a regular file (links followed): a named pipe would hold the loader
// until a writer came, and a device such as /dev/zero would be read until
// memory ran out. Test it with errors.Is.
var ErrNotRegularFile = errors.New("not a regular file")

// FileTooLargeError is the cause of the *Error for a catalog file larger
// than Limit bytes (MaxFileSize). Read it with errors.As.
type FileTooLargeError struct {
	File  string // the file, as the *Error names it
	Limit int64  // the bound it exceeds
}

func (e *FileTooLargeError) Error() string {
	return fmt.Sprintf("%s: larger than %d bytes, the most a policy or schema file may hold", e.File, e.Limit)
}

// dirFS is os.DirFS whose opens do not block: a named pipe opens at once
// (and is then refused by readFile) instead of waiting for a writer.
type dirFS string

func (d dirFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, err := regfile.OpenNonblocking(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// readFile reads one catalog file of fsys, refusing what is not a regular
// file and what holds more than MaxFileSize bytes; shown is the file's
// name in errors. The size is checked twice: by Stat before reading, and
// by the bytes read, for a file that grows in between.
func readFile(fsys fs.FS, name, shown string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, newError(err, "%s: %v", shown, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, newError(err, "%s: %v", shown, err)
	}
	if !fi.Mode().IsRegular() {
		e := newError(ErrNotRegularFile, "%s: %v (mode %s)", shown, ErrNotRegularFile, fi.Mode())
		e.File = shown
		return nil, e
	}
	tooLarge := func() error {
		cause := &FileTooLargeError{File: shown, Limit: MaxFileSize}
		e := newError(cause, "%v", cause)
		e.File = shown
		return e
	}
	if fi.Size() > MaxFileSize {
		return nil, tooLarge()
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, newError(err, "%s: %v", shown, err)
	}
	if len(data) > MaxFileSize {
		return nil, tooLarge()
	}
	return data, nil
}
