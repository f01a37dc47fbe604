package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/storetest"
)

// Disk-full is simulated with the store's fault hooks: before the write
// of a batch to the named log, half a record of garbage is appended to
// the tail segment (what a write cut short by ENOSPC leaves) and the write
// fails with ENOSPC. The store must take the garbage back and fail the
// batch with store.ErrFull. TestDiskFullReal does the same on a real,
// tiny tmpfs when the test may mount one.
func diskFull(t *testing.T, s *Store, log string, on *bool, mu *sync.Mutex) {
	s.faults.Store(&faults{write: func(w *logw) error {
		mu.Lock()
		defer mu.Unlock()
		if w.name != log || !*on {
			return nil
		}
		f, err := os.OpenFile(filepath.Join(w.dir, segmentName(w.tailStart)), os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		_, err = f.Write([]byte{0xac, 0x02, 1, 2, 3, 4, 5, 6, 7})
		require.NoError(t, err)
		require.NoError(t, f.Close())
		return fmt.Errorf("write %s: %w", w.dir, syscall.ENOSPC)
	}})
}

func TestDiskFullSimulated(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4096}
	s := open(t, dir, opts)
	ctx := t.Context()
	ms := appendN(t, s, "a", 1, 30)
	tail := func() (string, int64) {
		ss := segs(t, subjectLogDir(dir, "a"))
		p := ss[len(ss)-1].path
		return p, fileSize(t, p)
	}
	path, size := tail()

	var mu sync.Mutex
	on := true
	diskFull(t, s, "subject a", &on, &mu)

	m := msg("a", "full", at(time.Hour))
	m.IdemKey, m.IdemExpires = "k-full", at(2*time.Hour)
	_, _, err := s.Append(ctx, m)
	require.ErrorIs(t, err, store.ErrFull)
	require.ErrorIs(t, err, syscall.ENOSPC)

	p2, size2 := tail()
	require.Equal(t, path, p2)
	require.Equal(t, size, size2, "nothing half written stays")
	require.Equal(t, ms, readAll(t, s, "a"), "reads keep working")
	_, err = s.Lookup(ctx, "full")
	require.ErrorIs(t, err, store.ErrNotFound)
	f, l, err := s.Bounds(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, [2]uint64{1, 30}, [2]uint64{f, l})

	// Concurrent appends while the disk is full: all fail, none is visible.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, _, err := s.Append(ctx, msg("a", fmt.Sprint("c", i), base))
			require.ErrorIs(t, err, store.ErrFull)
		})
	}
	wg.Wait()
	require.Equal(t, ms, readAll(t, s, "a"))

	// Other logs are not affected.
	appendN(t, s, "b", 1, 3)

	mu.Lock()
	on = false
	mu.Unlock()
	got, dup, err := s.Append(ctx, m)
	require.NoError(t, err)
	require.False(t, dup, "the failed append reserved no idempotency key")
	require.Equal(t, uint64(31), got.Seq, "no sequence was used up")
	_, dup, err = s.Append(ctx, m)
	require.NoError(t, err)
	require.True(t, dup)

	require.NoError(t, s.Close(ctx))
	s = open(t, dir, opts)
	require.Empty(t, s.Recovered())
	require.Equal(t, append(ms, got), readAll(t, s, "a"))
}

func TestDiskFullOnSync(t *testing.T) {
	s := open(t, t.TempDir(), nil)
	ctx := t.Context()
	appendN(t, s, "a", 1, 5)
	fail := true
	var mu sync.Mutex
	s.faults.Store(&faults{sync: func(w *logw) error {
		mu.Lock()
		defer mu.Unlock()
		if fail && w.name == "subject a" {
			return fmt.Errorf("fsync: %w", syscall.ENOSPC)
		}
		return nil
	}})
	_, _, err := s.Append(ctx, msg("a", "x", base))
	require.ErrorIs(t, err, store.ErrFull)
	require.Len(t, readAll(t, s, "a"), 5, "a record whose fsync failed is taken back")
	mu.Lock()
	fail = false
	mu.Unlock()
	m, _, err := s.Append(ctx, msg("a", "x", base))
	require.NoError(t, err)
	require.Equal(t, uint64(6), m.Seq)
}

func TestDiskFullMetaAndAudit(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, nil)
	ctx := t.Context()
	k := store.GroupKey{Subject: "a", Group: "g"}
	require.NoError(t, s.MarkDone(ctx, k, 1))
	recs := storetest.Chain(4)
	require.NoError(t, s.AppendAudit(ctx, recs[:2]...))

	var mu sync.Mutex
	on := true
	for _, log := range []string{"meta", "audit", "quarantine"} {
		mu.Lock()
		on = true
		mu.Unlock()
		diskFull(t, s, log, &on, &mu)
		switch log {
		case "meta":
			require.ErrorIs(t, s.MarkDone(ctx, k, 2), store.ErrFull)
			require.ErrorIs(t, s.Put(ctx, "b", "k", []byte("v")), store.ErrFull)
			g, err := s.LoadGroup(ctx, k)
			require.NoError(t, err)
			require.Equal(t, uint64(1), g.Floor, "a failed record is never applied")
			_, err = s.Get(ctx, "b", "k")
			require.ErrorIs(t, err, store.ErrNotFound)
		case "audit":
			require.ErrorIs(t, s.AppendAudit(ctx, recs[2:]...), store.ErrFull)
			last, _, err := s.AuditHead(ctx)
			require.NoError(t, err)
			require.Equal(t, uint64(2), last.Seq)
		case "quarantine":
			require.ErrorIs(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q", Time: base}), store.ErrFull)
			_, err := s.GetQuarantine(ctx, "q")
			require.ErrorIs(t, err, store.ErrNotFound)
		}
	}
	mu.Lock()
	on = false
	mu.Unlock()
	require.NoError(t, s.MarkDone(ctx, k, 2))
	require.NoError(t, s.AppendAudit(ctx, recs[2:]...), "the chain continues from the committed head")
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q", Time: base}))
	require.NoError(t, s.Close(ctx))

	s = open(t, dir, nil)
	require.Empty(t, s.Recovered())
	g, err := s.LoadGroup(ctx, k)
	require.NoError(t, err)
	require.Equal(t, uint64(2), g.Floor)
	got, err := s.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 4)
}

// AppendAudit on a full disk fails with store.ErrFull and writes nothing;
// the log stays readable and verifiable meanwhile, takes the chain on
// from its committed head once there is room, and is whole enough for a
// clean shutdown (the strict reopen finds no half-written record).
func TestDiskFullAudit(t *testing.T) {
	for _, phase := range []string{"write", "fsync"} {
		t.Run(phase, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, nil)
			ctx := t.Context()
			recs := storetest.Chain(6)
			require.NoError(t, s.AppendAudit(ctx, recs[:2]...))

			var mu sync.Mutex
			full := true
			if phase == "write" {
				diskFull(t, s, "audit", &full, &mu)
			} else {
				s.faults.Store(&faults{sync: func(w *logw) error {
					mu.Lock()
					defer mu.Unlock()
					if full && w.name == "audit" {
						return fmt.Errorf("fsync: %w", syscall.ENOSPC)
					}
					return nil
				}})
			}
			for _, batch := range [][]store.AuditRecord{recs[2:3], recs[2:5]} {
				err := s.AppendAudit(ctx, batch...)
				require.ErrorIs(t, err, store.ErrFull)
				require.ErrorIs(t, err, syscall.ENOSPC)
			}
			last, _, err := s.AuditHead(ctx)
			require.NoError(t, err)
			require.Equal(t, recs[1], last, "nothing of a failed append is visible")
			got, err := s.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			require.Equal(t, recs[:2], got)
			n, err := VerifyAudit(dir)
			require.NoError(t, err)
			require.Equal(t, uint64(2), n, "the log on disk verifies while the disk is full")

			mu.Lock()
			full = false
			mu.Unlock()
			require.NoError(t, s.AppendAudit(ctx, recs[2:]...))
			n, err = VerifyAudit(dir)
			require.NoError(t, err)
			require.Equal(t, uint64(6), n)
			require.NoError(t, s.Close(ctx))
			require.FileExists(t, cleanPath(dir))

			s = open(t, dir, nil)
			require.Empty(t, s.Recovered())
			got, err = s.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			require.Equal(t, recs, got)
		})
	}
}
