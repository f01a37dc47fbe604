package policy

import (
	"io"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

// growingFS is a catalog whose subjects/a.json says it is an empty
// regular file but reads as '{' and then MaxFileSize spaces, as a file
// that grows while it is read would. (It ends, so that a loader that does
// not bound the read fails the test instead of running out of memory.)
type growingFS struct{ fstest.MapFS }

func (g growingFS) Open(name string) (fs.File, error) {
	if name == "subjects/a.json" {
		return &growingFile{left: MaxFileSize + 1}, nil
	}
	return g.MapFS.Open(name)
}

type growingFile struct{ left, read int }

func (*growingFile) Stat() (fs.FileInfo, error) { return sizelessInfo{}, nil }
func (*growingFile) Close() error               { return nil }
func (g *growingFile) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), g.left)]
	for i := range p {
		p[i] = ' '
	}
	if g.read == 0 && len(p) > 0 {
		p[0] = '{'
	}
	g.left -= len(p)
	g.read += len(p)
	return len(p), nil
}

type sizelessInfo struct{}

func (sizelessInfo) Name() string       { return "a.json" }
func (sizelessInfo) Size() int64        { return 0 }
func (sizelessInfo) Mode() fs.FileMode  { return 0o444 }
func (sizelessInfo) ModTime() time.Time { return time.Time{} }
func (sizelessInfo) IsDir() bool        { return false }
func (sizelessInfo) Sys() any           { return nil }

var _ fs.File = (*growingFile)(nil)

// A file that grows after it was measured (or a file system that reports
// no size) was read for as long as it gave bytes. LoadFS and LintFS stop
// at MaxFileSize bytes and refuse it as too large; a catalog whose files
// report a type other than regular is refused too.
func TestLoadFSBoundsTheRead(t *testing.T) {
	fsys := growingFS{fstest.MapFS{"subjects/a.json": {}}}
	for _, load := range []func() error{
		func() error { _, err := LoadFS(fsys); return err },
		func() error { _, err := LintFS(fsys); return err },
	} {
		err := load()
		var big *FileTooLargeError
		require.ErrorAs(t, err, &big, "%v", err)
		require.Equal(t, "subjects/a.json", big.File)
	}

	dev := fstest.MapFS{
		"subjects/a.json": {Data: []byte(`{"name":"a.b","version":"v1","intents":["x"]}`)},
		"schemas/s.json":  {Data: []byte(`{}`), Mode: fs.ModeDevice | fs.ModeCharDevice},
	}
	_, err := LoadFS(dev)
	require.ErrorIs(t, err, ErrNotRegularFile)
	require.Contains(t, err.Error(), "schemas/s.json")
}
