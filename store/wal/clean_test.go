package wal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

var cleanOpts = &Options{SegmentSize: 4096}

// populate writes to every log of s: messages on "a" over several
// segments, audit records, KV puts, quarantine records, and the kept copy
// of a message on "k" trimmed while its key is live.
func populate(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	appendN(t, s, "a", 1, 40)
	_, _, err := s.Append(ctx, keyedMsg("k", "k1", "k1", base, base.Add(time.Hour)))
	require.NoError(t, err)
	n, err := s.TrimThrough(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, s.AppendAudit(ctx, storetest.Chain(3)...))
	require.NoError(t, s.Put(ctx, "b", "k1", []byte("v1")))
	require.NoError(t, s.Put(ctx, "b", "k2", []byte("v2")))
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q1", Time: base}))
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q2", Time: base}))
}

// tailSegment returns the last segment file of the log logDir (relative
// to the data directory) and the offset of its last record.
func tailSegment(t *testing.T, dir, logDir string) (string, int64) {
	t.Helper()
	ss := segs(t, filepath.Join(dir, logDir))
	p := ss[len(ss)-1].path
	offs := offsets(t, p)
	require.NotEmpty(t, offs, "the tail segment of %s is empty", logDir)
	return p, offs[len(offs)-1]
}

// badTails damage the last record of a segment file.
var badTails = []struct {
	name string
	fn   func(t *testing.T, path string)
}{
	{"checksum", func(t *testing.T, path string) { flipByte(t, path, fileSize(t, path)-3) }},
	{"cut short", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, fileSize(t, path)-3)) }},
}

var everyLog = []string{"messages/a", "audit", "meta", "quarantine", "kept"}

// After a clean shutdown no write was in progress: a bad last record is
// damage, refused like damage anywhere else, and nothing is cut.
func TestBadTailAfterCleanShutdown(t *testing.T) {
	for _, logDir := range everyLog {
		for _, bad := range badTails {
			t.Run(logDir+"/"+bad.name, func(t *testing.T) {
				dir := t.TempDir()
				s := open(t, dir, cleanOpts)
				populate(t, s)
				require.NoError(t, s.Close(t.Context()))
				path, off := tailSegment(t, dir, logDir)
				bad.fn(t, path)
				size := fileSize(t, path)

				for range 2 { // a refused Open keeps the marker: it refuses again
					_, err := Open(dir, cleanOpts)
					require.ErrorIs(t, err, store.ErrCorrupt)
					var ce *store.CorruptError
					require.ErrorAs(t, err, &ce)
					require.Equal(t, path, ce.File)
					require.Equal(t, off, ce.Offset)
					require.Contains(t, ce.Reason, "after a clean shutdown")
					require.Equal(t, size, fileSize(t, path), "nothing is cut")
					require.FileExists(t, cleanPath(dir))
				}

				// The operator who accepts the loss removes the marker:
				// Open then drops the tail as after a crash.
				require.NoError(t, os.Remove(cleanPath(dir)))
				s = open(t, dir, cleanOpts)
				rec := s.Recovered()
				require.Len(t, rec, 1)
				require.Equal(t, path, rec[0].File)
				require.Equal(t, off, rec[0].Offset)
			})
		}
	}
}

// After a crash a torn tail is dropped, logged with its file, offset and
// size, and reported by Recovered.
func TestTornTailAfterCrash(t *testing.T) {
	for _, logDir := range everyLog {
		for _, bad := range badTails {
			t.Run(logDir+"/"+bad.name, func(t *testing.T) {
				s := open(t, t.TempDir(), cleanOpts)
				populate(t, s)
				dir := crashCopy(t, s)
				require.NoError(t, s.Close(t.Context()))
				path, off := tailSegment(t, dir, logDir)
				bad.fn(t, path)
				size := fileSize(t, path)

				var logs bytes.Buffer
				opts := *cleanOpts
				opts.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
				s = open(t, dir, &opts)
				name := strings.Replace(logDir, "messages/", "subject ", 1)
				rec := s.Recovered()
				require.Len(t, rec, 1)
				require.NotEmpty(t, rec[0].Reason)
				want := store.Truncation{Log: name, File: path, Offset: off, Bytes: size - off, Reason: rec[0].Reason}
				require.Equal(t, want, rec[0])
				require.Equal(t, off, fileSize(t, path), "the tail was cut")

				var line map[string]any
				require.NoError(t, json.Unmarshal(logs.Bytes(), &line), "one JSON log line: %s", logs.String())
				require.Equal(t, "WARN", line["level"])
				for k, v := range map[string]any{"log": name, "file": path, "offset": float64(off), "bytes": float64(size - off), "reason": want.Reason} {
					require.Equal(t, v, line[k], "log attribute %s", k)
				}
			})
		}
	}
}

func TestCleanShutdownMarker(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, cleanOpts)
	require.NoFileExists(t, cleanPath(dir), "a new store has no marker")
	populate(t, s)
	require.NoError(t, s.Close(t.Context()))
	require.FileExists(t, cleanPath(dir))

	s = open(t, dir, cleanOpts)
	require.NoFileExists(t, cleanPath(dir), "removed before any write")
	require.Empty(t, s.Recovered())
	require.NoError(t, s.Close(t.Context()))
	require.NoError(t, s.Close(t.Context()), "idempotent")
	require.FileExists(t, cleanPath(dir))

	// A crash while the marker was being written leaves CLEAN.tmp, which
	// is not a marker.
	require.NoError(t, os.Rename(cleanPath(dir), cleanPath(dir)+".tmp"))
	path, _ := tailSegment(t, dir, "audit")
	require.NoError(t, os.Truncate(path, fileSize(t, path)-3))
	s = open(t, dir, cleanOpts)
	require.Len(t, s.Recovered(), 1)
	require.NoFileExists(t, cleanPath(dir)+".tmp")
}

// A Close that did not get every log to disk, or a store with a log left
// unusable by a failed write, records no clean shutdown: the next Open
// recovers as after a crash.
func TestNoCleanMarkerAfterFailedClose(t *testing.T) {
	cases := []struct {
		name string
		fail func(t *testing.T, s *Store)
		fix  func(t *testing.T, dir string)
	}{
		{"final fsync fails", func(t *testing.T, s *Store) {
			s.faults.Store(&faults{sync: func(w *logw) error {
				if w.name == "audit" {
					return fmt.Errorf("fsync: %w", syscall.ENOSPC)
				}
				return nil
			}})
		}, nil},
		{"a log unusable after a failed write", func(t *testing.T, s *Store) {
			// The write fails, and taking it back fails too: a directory
			// named like a segment cannot be removed.
			s.faults.Store(&faults{write: func(w *logw) error {
				if w.name != "quarantine" {
					return nil
				}
				junk := filepath.Join(w.dir, segmentName(1000), "x")
				require.NoError(t, os.MkdirAll(junk, 0o750))
				return fmt.Errorf("write: %w", syscall.ENOSPC)
			}})
			ctx := t.Context()
			require.ErrorIs(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q3", Time: base}), store.ErrFull)
			err := s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q4", Time: base})
			require.ErrorContains(t, err, "unusable")
			require.ErrorIs(t, err, store.ErrFull)
		}, func(t *testing.T, dir string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "quarantine", segmentName(1000))))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, cleanOpts)
			populate(t, s)
			c.fail(t, s)
			err := s.Close(t.Context())
			if c.fix == nil {
				require.ErrorIs(t, err, store.ErrFull)
				require.ErrorContains(t, err, "wal: close audit:")
			} else {
				c.fix(t, dir)
			}
			require.NoFileExists(t, cleanPath(dir))

			path, off := tailSegment(t, dir, "messages/a")
			require.NoError(t, os.Truncate(path, fileSize(t, path)-3))
			s = open(t, dir, cleanOpts)
			require.Len(t, s.Recovered(), 1, "recovered as after a crash")
			require.Equal(t, off, s.Recovered()[0].Offset)
			require.NoError(t, s.Close(t.Context()))
			require.FileExists(t, cleanPath(dir))
		})
	}
}

// The offline tools refuse a bad last audit record after a clean shutdown,
// as Open does, and ignore it as a write cut short otherwise.
func TestVerifyAuditBadTail(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprint("clean=", clean), func(t *testing.T) {
			s := open(t, t.TempDir(), nil)
			require.NoError(t, s.AppendAudit(t.Context(), storetest.Chain(3)...))
			dir := s.Dir()
			if !clean {
				dir = crashCopy(t, s)
			}
			require.NoError(t, s.Close(t.Context()))
			path, off := tailSegment(t, dir, "audit")
			flipByte(t, path, fileSize(t, path)-3)

			n, err := VerifyAudit(dir)
			var out bytes.Buffer
			eerr := ExportAudit(dir, &out)
			require.Equal(t, 2, bytes.Count(out.Bytes(), []byte("\n")), "the good records are exported")
			if !clean {
				require.NoError(t, err)
				require.Equal(t, uint64(2), n)
				require.NoError(t, eerr)
				return
			}
			for _, err := range []error{err, eerr} {
				var ce *store.CorruptError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, path, ce.File)
				require.Equal(t, off, ce.Offset)
			}
		})
	}
}

// TestOpenWritesOnlyWithoutMarker: Open may write (here it chains the
// acceptance records a failed audit write kept from the audit log, which
// a clean Close does not prevent) and a crash may cut that write short.
// The marker must be gone before the write, or the next Open takes the
// torn record for damage after a clean shutdown and refuses the store.
func TestOpenWritesOnlyWithoutMarker(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s, err := Open(dir, cleanOpts)
	require.NoError(t, err)
	s.faults.Store(&faults{write: func(w *logw) error {
		if w == s.audit.w {
			return fmt.Errorf("write: %w", syscall.EIO)
		}
		return nil
	}})
	_, _, err = s.AppendAccepted(ctx, msg("s", "m1", base), acceptance("p-m1"))
	require.NoError(t, err)
	_ = s.Close(ctx) // the audit log is whole: a clean shutdown
	require.FileExists(t, cleanPath(dir))

	// The crash image of the next Open, taken as it writes the audit log:
	// whatever it removed so far, and half a record at the audit tail.
	var crashed string
	hook := &faults{write: func(w *logw) error {
		if w.name == "audit" && crashed == "" {
			crashed = t.TempDir()
			require.NoError(t, os.CopyFS(crashed, os.DirFS(dir)))
			ss := segs(t, auditDir(crashed))
			f, err := os.OpenFile(ss[len(ss)-1].path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte{0xac, 0x02, 1, 2, 3})
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		return nil
	}}
	s, err = Open(dir, &Options{SegmentSize: cleanOpts.SegmentSize, faults: hook})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	require.NotEmpty(t, crashed, "Open restored the record")

	s, err = Open(crashed, cleanOpts)
	require.NoError(t, err, "a crash during Open's own write is a crash, not damage")
	require.Len(t, s.Recovered(), 1)
	requireAccepted(t, s, map[string]string{"m1": "s"})
	require.NoError(t, s.Close(ctx))
}
