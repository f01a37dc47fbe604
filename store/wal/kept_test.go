package wal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/wal/crashtest"
)

// keyedMsg is msg with idempotency key k, live until exp.
func keyedMsg(subject, id, k string, t, exp time.Time) store.Message {
	m := msg(subject, id, t)
	m.IdemKey, m.IdemExpires = k, exp
	return m
}

// requireRetry appends a retry of key k at time t and requires it to be a
// duplicate of want.
func requireRetry(t *testing.T, s *Store, want store.Message, k string, at time.Time, why string) {
	t.Helper()
	got, dup, err := s.Append(t.Context(), keyedMsg(want.Subject, want.ID+"-retry", k, at, at.Add(time.Hour)))
	require.NoError(t, err)
	require.True(t, dup, why)
	require.Equal(t, want, got, why)
}

// requireKeptAccounting checks that keptBytes is the sum of the kept
// bodies, and returns how many copies are kept.
func requireKeptAccounting(t *testing.T, s *Store) int {
	t.Helper()
	x := &s.msgs.idx
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, m := range x.kept {
		n += len(m.Body)
	}
	require.Equal(t, n, x.keptBytes, "keptBytes counts every kept body once")
	return len(x.kept)
}

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	}))
	return n
}

// A message trimmed while its key is live is still the answer to a retry
// after a restart, and after another; once the key has expired (by the
// store's clock, the latest message time) a retry is a new message, and
// the copy leaves the disk.
func TestKeptCopiesSurviveReopen(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncNone} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			opts := &Options{Sync: mode, SegmentSize: 512}
			s := open(t, dir, opts)
			ctx := t.Context()
			orig, _, err := s.Append(ctx, keyedMsg("a", "m1", "k", at(0), at(time.Hour)))
			require.NoError(t, err)
			appendN(t, s, "a", 2, 3)
			n, err := s.TrimThrough(ctx, "a", 2)
			require.NoError(t, err)
			require.Equal(t, 2, n)
			require.NoError(t, s.Close(ctx))

			for i := range 2 {
				s = open(t, dir, opts)
				require.Empty(t, s.Recovered())
				_, err = s.Lookup(ctx, "m1")
				require.ErrorIs(t, err, store.ErrNotFound, "the original was trimmed")
				requireRetry(t, s, orig, "k", at(time.Minute), fmt.Sprint("reopen ", i+1, ": the key is live"))
				require.Equal(t, 1, requireKeptAccounting(t, s))
				require.NoError(t, s.Close(ctx))
			}

			s = open(t, dir, opts)
			late, dup, err := s.Append(ctx, keyedMsg("a", "m1-late", "k", at(time.Hour), at(2*time.Hour)))
			require.NoError(t, err)
			require.False(t, dup, "the key expired: a new message")
			require.Equal(t, uint64(5), late.Seq)
			require.NoError(t, s.Close(ctx))

			s = open(t, dir, opts)
			require.Zero(t, requireKeptAccounting(t, s), "the expired copy is not brought back")
			s.kept.mu.Lock()
			require.Empty(t, s.kept.ents, "and Open dropped it from the kept log")
			s.kept.mu.Unlock()
			requireRetry(t, s, late, "k", at(time.Hour+time.Minute), "the new claim holds")
		})
	}
}

// A crash after the copies are written but before the subject's log is
// truncated leaves the original and its copy: Open keeps the original's
// claim, counts no copy, and a later trim keeps it again. A crash after
// the truncation loses nothing either.
func TestKeptCopiesCrashWindows(t *testing.T) {
	opts := &Options{SegmentSize: 512}
	s := open(t, t.TempDir(), opts)
	ctx := t.Context()
	orig, _, err := s.Append(ctx, keyedMsg("a", "m1", "k", at(0), at(time.Hour)))
	require.NoError(t, err)
	appendN(t, s, "a", 2, 2)
	var between string
	s.faults.Store(&faults{truncate: func(w *logw) error {
		if w.name == "subject a" && between == "" {
			between = crashCopy(t, s)
		}
		return nil
	}})
	_, err = s.TrimThrough(ctx, "a", 1)
	require.NoError(t, err)
	s.faults.Store(nil)
	require.NotEmpty(t, between)
	require.Positive(t, dirBytes(t, filepath.Join(between, "kept")), "the copy is on disk before the truncation")
	after := crashCopy(t, s)

	// Killed after the truncation.
	s2 := open(t, after, opts)
	requireRetry(t, s2, orig, "k", at(time.Minute), "crash after the truncation: the key is live")
	require.Equal(t, 1, requireKeptAccounting(t, s2))
	require.NoError(t, s2.Close(ctx))

	// Killed between the copy and the truncation.
	s2 = open(t, between, opts)
	first, _, err := s2.Bounds(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), first, "the original is still there")
	require.Zero(t, requireKeptAccounting(t, s2), "no copy while the original is there")
	requireRetry(t, s2, orig, "k", at(time.Minute), "crash before the truncation: the original answers")
	n, err := s2.TrimThrough(ctx, "a", 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, requireKeptAccounting(t, s2), "the copy is counted once")
	require.NoError(t, s2.Close(ctx))
	s2 = open(t, between, opts)
	require.Equal(t, 1, requireKeptAccounting(t, s2), "the copy is counted once after a reopen")
	requireRetry(t, s2, orig, "k", at(time.Minute), "the second trim kept it")
	s2.kept.mu.Lock()
	require.Len(t, s2.kept.ents, 1, "the first copy, dead, left the kept log")
	s2.kept.mu.Unlock()
}

// The kept log keeps only what is live: copies whose keys expire leave
// it, also behind a copy that lives long (which the compaction moves to
// the tail), so its size stays bounded however many messages are trimmed.
func TestKeptLogStaysBounded(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Sync: SyncNone, SegmentSize: 512}
	s := open(t, dir, opts)
	ctx := t.Context()
	long, _, err := s.Append(ctx, keyedMsg("a", "long", "long", at(0), at(1000*time.Hour)))
	require.NoError(t, err)
	var last store.Message
	const rounds = 200
	for i := 1; i <= rounds; i++ {
		d := time.Duration(i) * time.Second
		last, _, err = s.Append(ctx, keyedMsg("a", fmt.Sprint("m", i), fmt.Sprint("k", i), at(d), at(d+5*time.Second)))
		require.NoError(t, err)
		_, err = s.TrimThrough(ctx, "a", last.Seq)
		require.NoError(t, err)
	}
	rec := int64(len(appendKept(nil, &last))) + 2
	// Live: the long copy and the last five; dead bytes below a segment
	// or below the live ones; one segment of slack.
	bound := 2*7*rec + 2*int64(opts.SegmentSize)
	size := dirBytes(t, s.keptDir())
	require.Less(t, size, bound, "the kept log of %d trims (records of %d bytes)", rounds, rec)
	require.Greater(t, size, 5*rec, "the live copies are on disk")
	require.LessOrEqual(t, requireKeptAccounting(t, s), 14, "expired copies leave memory with the log")
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, opts)
	requireRetry(t, s, long, "long", at(rounds*time.Second), "the long-lived copy survived the compactions")
	requireRetry(t, s, last, last.IdemKey, at(rounds*time.Second), "so did the last")
	require.Less(t, dirBytes(t, s.keptDir()), bound)
}

// A write of the copies that fails makes the trim fail: nothing is
// truncated and the claim stays with the original.
func TestKeptWriteFailureStopsTheTrim(t *testing.T) {
	s := open(t, t.TempDir(), &Options{SegmentSize: 512})
	ctx := t.Context()
	orig, _, err := s.Append(ctx, keyedMsg("a", "m1", "k", at(0), at(time.Hour)))
	require.NoError(t, err)
	appendN(t, s, "a", 2, 1)
	s.faults.Store(&faults{write: func(w *logw) error {
		if w.name == "kept" {
			return fmt.Errorf("write: disk on fire")
		}
		return nil
	}})
	_, err = s.TrimThrough(ctx, "a", 1)
	require.ErrorContains(t, err, "disk on fire")
	s.faults.Store(nil)
	first, _, err := s.Bounds(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, uint64(1), first, "nothing was trimmed")
	require.Zero(t, requireKeptAccounting(t, s))
	n, err := s.TrimThrough(ctx, "a", 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requireRetry(t, s, orig, "k", at(time.Minute), "kept on the second try")
}

var keptCrashOpts = &Options{Sync: SyncBatch, SegmentSize: 4096}

// TestCrashKept SIGKILLs a child that appends messages with idempotency
// keys and trims each one right after, so that kills land before, inside
// and after the writes of the copies and the truncations. After each kill
// every acknowledged message's key still answers a retry with it.
func TestCrashKept(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	crashtest.Run(t, crashtest.Config{
		Child: "TestCrashKeptChild", Rounds: 8, MinRun: 50 * time.Millisecond, MaxRun: 300 * time.Millisecond,
		Check: checkCrashKept,
	})
}

// TestCrashKeptChild is the child of TestCrashKept.
func TestCrashKeptChild(t *testing.T) {
	dir, ok := crashtest.ChildDir()
	if !ok {
		t.Skip("runs as the child of TestCrashKept")
	}
	s, err := Open(dir, keptCrashOpts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	pid := os.Getpid()
	stop := time.After(20 * time.Second) // killed long before
	for i := 0; ; i++ {
		select {
		case <-stop:
			_ = s.Close(ctx)
			return
		default:
		}
		id := fmt.Sprintf("%d-%d", pid, i)
		now := time.Now()
		m, _, err := s.Append(ctx, keyedMsg("t", id, "key-"+id, now, now.Add(time.Hour)))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		crashtest.Ack("kept", m.Seq, id)
		if _, err := s.TrimThrough(ctx, "t", m.Seq); err != nil {
			fmt.Fprintln(os.Stderr, "child trim:", err)
			os.Exit(3)
		}
	}
}

func checkCrashKept(t *testing.T, dir string, acks []string) {
	s, err := Open(dir, keptCrashOpts)
	require.NoError(t, err, "reopen after the kill")
	defer func() { require.NoError(t, s.Close(context.Background())) }()
	for _, a := range acks {
		f := strings.Fields(a)
		seq, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(t, err)
		now := time.Now()
		got, dup, err := s.Append(t.Context(), keyedMsg("t", "retry-"+f[2], "key-"+f[2], now, now.Add(time.Hour)))
		require.NoError(t, err)
		require.True(t, dup, "a retry of acknowledged message %s after the crash is a duplicate", f[2])
		require.Equal(t, f[2], got.ID)
		require.Equal(t, seq, got.Seq)
	}
	requireKeptAccounting(t, s)
}
