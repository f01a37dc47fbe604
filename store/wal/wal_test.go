package wal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/leakcheck"
	"pigeon/store"
)

// TestMain fails the run when a test leaves goroutines behind, as every
// package's does (leakcheck, which knows the goroutines of the runtime and
// the test framework: a count of goroutines took the signal handler that
// fuzzing starts for a leak, and failed every fuzzing run).
func TestMain(m *testing.M) { leakcheck.Main(m) }

// fast is for tests about something other than durability: no fsync.
var fast = &Options{Sync: SyncNone}

var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func open(t testing.TB, dir string, opts *Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func msg(subject, id string, t time.Time) store.Message {
	return store.Message{Subject: subject, ID: id, Time: t, Body: bytes.Repeat([]byte(id+"."), 300/(len(id)+1)+1)[:300]}
}

func appendN(t testing.TB, s *Store, subject string, from, n int) []store.Message {
	t.Helper()
	out := make([]store.Message, 0, n)
	for i := from; i < from+n; i++ {
		m, dup, err := s.Append(context.Background(), msg(subject, fmt.Sprintf("%s-%d", subject, i), at(time.Duration(i)*time.Second)))
		require.NoError(t, err)
		require.False(t, dup)
		out = append(out, m)
	}
	return out
}

func readAll(t testing.TB, s *Store, subject string) []store.Message {
	t.Helper()
	ms, err := s.Read(context.Background(), subject, 0, 0)
	require.NoError(t, err)
	return ms
}

func subjectLogDir(dir, subject string) string {
	return filepath.Join(dir, "messages", subjectDir(subject))
}

func segs(t testing.TB, logDir string) []segFile {
	t.Helper()
	ss, err := listSegments(logDir)
	require.NoError(t, err)
	require.NotEmpty(t, ss)
	return ss
}

func TestReopenAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 2048}
	s := open(t, dir, opts)
	a := appendN(t, s, "orders.created", 1, 200)
	b := appendN(t, s, "odd/subject name%ü", 1, 30)
	require.NoError(t, s.Close(t.Context()))
	require.Greater(t, len(segs(t, subjectLogDir(dir, "orders.created"))), 20)

	s = open(t, dir, opts)
	require.Empty(t, s.Recovered())
	require.Equal(t, a, readAll(t, s, "orders.created"))
	require.Equal(t, b, readAll(t, s, "odd/subject name%ü"))
	for _, m := range []store.Message{a[0], a[77], a[199], b[29]} {
		got, err := s.Lookup(t.Context(), m.ID)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	m, _, err := s.Append(t.Context(), msg("orders.created", "next", at(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, uint64(201), m.Seq)
}

func TestTimesKeepTheirZone(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	for i, tm := range []time.Time{
		base, base.Local(), base.In(time.FixedZone("XST", 5*3600+1800)), time.Unix(-1e10, 7).UTC(),
	} {
		m := msg("z", fmt.Sprint("z", i), tm)
		m.IdemKey, m.IdemExpires = fmt.Sprint("k", i), tm.Add(time.Hour)
		_, _, err := s.Append(t.Context(), m)
		require.NoError(t, err)
		got, err := s.Lookup(t.Context(), m.ID)
		require.NoError(t, err)
		require.True(t, tm.Equal(got.Time))
		_, off1 := tm.Zone()
		_, off2 := got.Time.Zone()
		require.Equal(t, off1, off2)
	}
}

// The writer mirrors tidwall/wal's segment cycling to know which file to
// fsync; check the mirror against the directory.
func TestTailMirror(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, &Options{SegmentSize: 1000, Sync: SyncNone})
	sub, err := s.subject("m", true)
	require.NoError(t, err)
	for i := range 300 {
		m := msg("m", fmt.Sprint(i), base)
		m.Body = m.Body[:(i*37)%300] // sizes vary so segments end anywhere
		_, _, err := s.Append(t.Context(), m)
		require.NoError(t, err)
		ss := segs(t, sub.w.dir)
		last := ss[len(ss)-1]
		fi, err := os.Stat(last.path)
		require.NoError(t, err)
		require.Equal(t, last.start, sub.w.tailStart, "after append %d", i)
		require.Equal(t, fi.Size(), sub.w.tailBytes, "after append %d", i)
	}
	// and after trimming into the tail segment
	_, err = s.TrimBefore(t.Context(), "m", at(time.Hour))
	require.NoError(t, err)
	ss := segs(t, sub.w.dir)
	require.Len(t, ss, 1)
	require.Equal(t, ss[0].start, sub.w.tailStart)
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, store.ErrLocked)
	require.NoError(t, s.Close(t.Context()))
	s, err = Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
}

// TestLockedByProcess holds the lock in a child process, then kills it:
// the kernel releases a flock with its holder.
func TestLockedByProcess(t *testing.T) {
	if dir := os.Getenv("PIGEON_LOCK_CHILD"); dir != "" {
		s, err := Open(dir, nil)
		if err != nil {
			os.Exit(2)
		}
		fmt.Println("LOCKED")
		time.Sleep(time.Minute)
		_ = s.Close(context.Background())
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockedByProcess$")
	cmd.Env = append(os.Environ(), "PIGEON_LOCK_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "LOCKED\n", line)
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, store.ErrLocked)
	var le *LockedError
	require.ErrorAs(t, err, &le, "the refusal names the holder")
	require.Equal(t, cmd.Process.Pid, le.PID)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close(t.Context()))
}

func TestNotWritable(t *testing.T) {
	t.Run("missing is created", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		s := open(t, dir, fast)
		appendN(t, s, "x", 1, 1)
		require.DirExists(t, filepath.Join(dir, "messages"))
	})
	t.Run("path is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
		_, err := Open(file, nil)
		require.ErrorIs(t, err, syscall.ENOTDIR)
		require.Contains(t, err.Error(), "create data directory")
		_, err = Open(filepath.Join(file, "below"), nil)
		require.Error(t, err)
	})
	t.Run("read-only mount", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, nil)
		appendN(t, s, "a", 1, 3)
		require.NoError(t, s.Close(t.Context()))
		// Root ignores permission bits, so make the file system read-only.
		mountReadOnly(t, dir)
		_, err := Open(dir, nil)
		require.ErrorIs(t, err, syscall.EROFS)
		require.Contains(t, err.Error(), "not writable")
		_, err = Open(filepath.Join(dir, "new"), nil)
		require.Error(t, err)
		// the offline tools still read it
		n, err := VerifyAudit(dir)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

func TestBadOptions(t *testing.T) {
	_, err := Open(t.TempDir(), &Options{Sync: 7})
	require.Error(t, err)
	opts := &Options{}
	s := open(t, t.TempDir(), opts)
	require.Equal(t, Options{}, *opts, "Open must not write defaults into the caller's options")
	require.Equal(t, SyncBatch, s.opts.Sync)
}

func TestRecordTooLarge(t *testing.T) {
	s := open(t, t.TempDir(), &Options{MaxRecordSize: 1024})
	m := msg("a", "big", base)
	m.Body = make([]byte, 2000)
	_, _, err := s.Append(t.Context(), m)
	require.Error(t, err)
	appendN(t, s, "a", 1, 1)
}

func TestMetaCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{CompactAfter: 64, SegmentSize: 4096, Sync: SyncNone}
	s := open(t, dir, opts)
	ctx := t.Context()
	k := store.GroupKey{Subject: "a", Group: "g"}
	for i := 1; i <= 600; i++ {
		require.NoError(t, s.MarkAttempt(ctx, k, uint64(i), 1))
		if i%3 != 0 {
			require.NoError(t, s.MarkDone(ctx, k, uint64(i)))
		}
		require.NoError(t, s.Put(ctx, "b", fmt.Sprint("k", i%50), []byte(fmt.Sprint("v", i))))
	}
	require.NoError(t, s.PutContract(ctx, store.ContractRecord{ID: "c", ExpiresAt: at(time.Hour), Body: []byte("g")}))
	want, err := s.LoadGroup(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(2), want.Floor)
	kv, err := s.List(ctx, "b")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		first, _ := s.meta.w.bounds()
		return first > 1000
	}, 30*time.Second, 5*time.Millisecond, "the compactor truncates the meta log")
	require.FileExists(t, filepath.Join(dir, "meta.snapshot"))
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	got, err := s.LoadGroup(ctx, k)
	require.NoError(t, err)
	require.Equal(t, want, got)
	kv2, err := s.List(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, kv, kv2)
	c, err := s.GetContract(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, "g", string(c.Body))
}

// A snapshot written but not yet followed by the truncation (a crash in
// between) replays correctly: entries it covers are skipped.
func TestSnapshotBeforeTruncation(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := t.Context()
	for i := range 10 {
		require.NoError(t, s.Put(ctx, "b", fmt.Sprint(i), []byte{byte(i)}))
	}
	s.meta.mu.RLock()
	snap := s.meta.encodeSnapshot(s.meta.applied)
	s.meta.mu.RUnlock()
	require.NoError(t, writeFileAtomic(s.snapshotPath(), snap))
	require.NoError(t, s.Delete(ctx, "b", "3"))
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, nil)
	kv, err := s.List(ctx, "b")
	require.NoError(t, err)
	require.Len(t, kv, 9)
	require.NotContains(t, kv, "3")
}

func TestSubjectDirs(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"a", "A", ".", "..", ".hidden", "a.b", "a/b", "a%2Fb", "ü", strings.Repeat("x", 300), strings.Repeat("y", 300)} {
		d := subjectDir(name)
		require.NotContains(t, d, "/")
		require.NotEqual(t, ".", d)
		require.NotEqual(t, "..", d)
		require.LessOrEqual(t, len(d), 201)
		if prev, ok := seen[d]; ok {
			t.Fatalf("%q and %q share directory %q", prev, name, d)
		}
		seen[d] = name
	}
	dir := t.TempDir()
	s := open(t, dir, fast)
	long := strings.Repeat("long.", 60)
	appendN(t, s, long, 1, 2)
	appendN(t, s, "..", 1, 2)
	require.NoError(t, s.Close(t.Context()))
	s = open(t, dir, fast)
	require.Len(t, readAll(t, s, long), 2)
	require.Len(t, readAll(t, s, ".."), 2)
}

// A crash between creating a subject's directory and writing its name
// leaves an empty directory that Open removes.
func TestUnfinishedSubject(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, fast)
	require.NoError(t, s.Close(t.Context()))
	half := filepath.Join(dir, "messages", "half")
	require.NoError(t, os.MkdirAll(half, 0o750))
	s = open(t, dir, fast)
	require.NoDirExists(t, half)
	require.NoError(t, s.Close(t.Context()))

	// but a subject log with data and no name is damage
	s = open(t, dir, fast)
	appendN(t, s, "a", 1, 1)
	require.NoError(t, s.Close(t.Context()))
	require.NoError(t, os.Remove(filepath.Join(subjectLogDir(dir, "a"), "SUBJECT")))
	_, err := Open(dir, fast)
	require.ErrorIs(t, err, store.ErrCorrupt)
}

func TestClosedAndCanceled(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := s.Append(ctx, msg("a", "x", base))
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, s.Close(t.Context()))
	_, err = s.TrimAuditBefore(t.Context(), base)
	require.ErrorIs(t, err, store.ErrClosed)
	_, err = s.TrimQuarantineBefore(t.Context(), base)
	require.ErrorIs(t, err, store.ErrClosed)
	require.NoError(t, s.Close(t.Context()))
}

func TestErrorsAreDistinct(t *testing.T) {
	err := writeError("x", fmt.Errorf("write: %w", syscall.ENOSPC))
	require.ErrorIs(t, err, store.ErrFull)
	require.ErrorIs(t, err, syscall.ENOSPC)
	err = writeError("x", syscall.EIO)
	require.False(t, errors.Is(err, store.ErrFull))
}

// The commit delay never holds up a lone writer, and lets concurrent
// writers share batches.
func TestBatchDelay(t *testing.T) {
	ctx := t.Context()
	t.Run("a lone writer is never delayed", func(t *testing.T) {
		s := open(t, t.TempDir(), &Options{BatchDelay: time.Hour})
		for i := range 20 {
			_, _, err := s.Append(ctx, msg("a", fmt.Sprint("m", i), at(0)))
			require.NoError(t, err) // a delayed append would hang here
		}
		sub, _ := s.subject("a", false)
		require.Equal(t, uint64(20), sub.w.batches.Load())
	})
	t.Run("the leader waits for as many as the last batch held", func(t *testing.T) {
		s := open(t, t.TempDir(), &Options{BatchDelay: time.Hour})
		_, _, err := s.Append(ctx, msg("a", "first", at(0)))
		require.NoError(t, err)
		sub, _ := s.subject("a", false)
		w := sub.w
		w.mu.Lock()
		w.lastBatch = 4 // as if four writers had shared the last fsync
		w.mu.Unlock()
		before := w.batches.Load()
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				_, _, err := s.Append(ctx, msg("a", fmt.Sprint("m", i), at(0)))
				require.NoError(t, err)
			})
		}
		wg.Wait() // the fourth arrival wakes the leader; an hour's wait would time out
		require.Equal(t, before+1, w.batches.Load(), "one batch, one fsync for the four")
		require.Len(t, readAll(t, s, "a"), 5)
	})
	t.Run("disabled or adaptive", func(t *testing.T) {
		o := (&Options{BatchDelay: -1}).withDefaults()
		require.Negative(t, o.BatchDelay)
		s := open(t, t.TempDir(), nil)
		_, _, err := s.Append(ctx, msg("a", "m", at(0)))
		require.NoError(t, err)
		sub, _ := s.subject("a", false)
		w := sub.w
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, c := range []struct {
			avg, want time.Duration
		}{
			{0, firstAdaptiveDelay},
			{10 * time.Microsecond, minAdaptiveDelay},
			{400 * time.Microsecond, 400 * time.Microsecond},
			{time.Second, maxAdaptiveDelay},
		} {
			w.syncAvg = c.avg
			require.Equal(t, c.want, w.batchDelay(), "after fsyncs of %v", c.avg)
		}
	})
}
