package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	twal "github.com/tidwall/wal"

	"pigeon/store"
)

// logw is one tidwall/wal log with a group-committing writer.
//
// Writers enqueue requests under mu and wait. Whoever finds the log idle
// becomes the leader: it takes the whole queue (one request under
// SyncAlways), writes it with one WriteBatch, fsyncs once (unless
// SyncNone), marks every request done and wakes the rest. Requests that
// arrive meanwhile form the next batch, so concurrent writers share one
// fsync and each returns only after its own records are on disk. No
// goroutine is involved: a caller is either waiting or leading.
//
// A failed write or fsync takes the log back to its last committed entry
// (cutLog) so that nothing half written stays, and fails every request
// that was not committed.
type logw struct {
	s    *Store
	dir  string
	name string // for errors: "meta", "audit", "subject orders.created"

	// rmu serialises reads: tidwall/wal's Read fills its segment cache
	// while holding only a read lock, which is not safe for concurrent
	// readers. Writes are excluded from reads by tidwall's own lock.
	rmu sync.Mutex
	log *twal.Log // replaced only by repair, under rmu and busy

	mu        sync.Mutex
	cond      sync.Cond
	next      uint64 // index of the next enqueued entry
	queue     []*wreq
	busy      bool  // a leader is writing, or exclusive holds the log
	failed    error // set when a failed write could not be taken back
	committed atomic.Uint64
	first     atomic.Uint64

	// Owned by whoever holds busy.
	batch     twal.Batch
	tailStart uint64   // first index of the tail segment (mirrors tidwall)
	tailBytes int64    // size of the tail segment (mirrors tidwall)
	tailFile  *os.File // read-only handle used for fsync; nil = reopen
	tailNew   bool     // the tail segment was created since the last dir sync

	onCommit func(r *wreq) // with mu held, in index order
	onFail   func(r *wreq) // with mu held, for each request taken back
}

// wreq is one caller's request: its entries and, after it is done, the
// outcome. The owner fields carry what onCommit and onFail need.
type wreq struct {
	data  [][]byte
	first uint64 // index of data[0], set when enqueued
	done  bool
	err   error

	id, key string // messages: id and idempotency key
	loc     uint64 // messages: packed location
	res     int    // meta: result of applying (e.g. how many removed)
	aux     any
}

func (r *wreq) last() uint64 { return r.first + uint64(len(r.data)) - 1 }

func (s *Store) twalOptions() *twal.Options {
	return &twal.Options{
		NoSync:           true, // we fsync ourselves, once per batch
		SegmentSize:      s.opts.SegmentSize,
		LogFormat:        twal.Binary,
		SegmentCacheSize: 2,
		NoCopy:           true, // records are decoded (copied) at once and never modified
		AllowEmpty:       true,
		DirPerms:         0o750,
		FilePerms:        0o640,
	}
}

// openLog scans the log in dir (calling visit for every record), drops a
// torn tail, opens it with tidwall/wal and returns its writer.
func (s *Store) openLog(dir, name string, visit visitFunc) (*logw, scanStats, error) {
	fresh := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fresh = true
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, scanStats{}, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	st, err := scanLog(dir, max(s.opts.MaxRecordSize, 1<<30), visit)
	if err != nil {
		return nil, st, err
	}
	if st.torn {
		if err := truncateFile(st.tailPath, st.tailSize); err != nil {
			return nil, st, fmt.Errorf("wal: drop torn tail of %s: %w", st.tailPath, err)
		}
		s.tornMu.Lock()
		s.torn = append(s.torn, TornTail{File: st.tailPath, Offset: st.tailSize, Reason: st.tornReason})
		s.tornMu.Unlock()
	}
	l, err := twal.Open(dir, s.twalOptions())
	if err != nil {
		if errors.Is(err, twal.ErrCorrupt) {
			return nil, st, &store.CorruptError{File: dir, Offset: -1, Reason: "tidwall/wal refused the log: " + err.Error()}
		}
		return nil, st, fmt.Errorf("wal: open %s: %w", dir, err)
	}
	fi, _ := l.FirstIndex()
	li, _ := l.LastIndex()
	if st.tailPath == "" { // new log: tidwall created segment 1
		st.first, st.last, st.tailStart = fi, li, fi
	}
	if fi != st.first || li != st.last {
		l.Close()
		return nil, st, &store.CorruptError{File: dir, Offset: -1,
			Reason: fmt.Sprintf("tidwall/wal sees entries %d..%d, scan found %d..%d", fi, li, st.first, st.last)}
	}
	if fresh {
		err := syncDir(dir)
		if err == nil {
			err = syncDir(filepath.Dir(dir))
		}
		if err != nil {
			l.Close()
			return nil, st, fmt.Errorf("wal: sync new log %s: %w", dir, err)
		}
	}
	w := &logw{s: s, dir: dir, name: name, log: l, next: li + 1, tailStart: st.tailStart, tailBytes: st.tailSize}
	w.cond.L = &w.mu
	w.committed.Store(li)
	w.first.Store(fi)
	w.onCommit = func(*wreq) {}
	w.onFail = func(*wreq) {}
	return w, st, nil
}

// enqueueLocked gives r its indexes and queues it. mu must be held.
func (w *logw) enqueueLocked(r *wreq) {
	r.first = w.next
	w.next += uint64(len(r.data))
	w.queue = append(w.queue, r)
}

// submit enqueues r and waits until it is committed or failed.
func (w *logw) submit(r *wreq) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	w.enqueueLocked(r)
	return w.waitLocked(r)
}

// waitLocked waits for r, leading a commit whenever the log is idle.
func (w *logw) waitLocked(r *wreq) error {
	for !r.done {
		if w.busy {
			w.cond.Wait()
			continue
		}
		w.commitLocked()
	}
	return r.err
}

// commitLocked writes and syncs one batch. mu is held on entry and exit
// and released during I/O.
func (w *logw) commitLocked() {
	if len(w.queue) == 0 {
		return
	}
	w.busy = true
	var batch []*wreq
	if w.s.opts.Sync == SyncAlways {
		batch, w.queue = w.queue[:1:1], w.queue[1:]
	} else {
		batch, w.queue = w.queue, nil
	}
	keep := w.committed.Load()
	w.mu.Unlock()
	err := w.write(batch, keep)
	w.mu.Lock()
	if err != nil {
		w.takeBackLocked(keep, err, batch)
	} else {
		w.committed.Store(batch[len(batch)-1].last())
		for _, r := range batch {
			w.onCommit(r)
			r.done = true
		}
	}
	w.busy = false
	w.cond.Broadcast()
}

// write appends the batch with one WriteBatch and fsyncs it. Only the
// holder of busy calls it.
func (w *logw) write(batch []*wreq, keep uint64) error {
	if f := w.s.faults.Load(); f != nil && f.write != nil {
		if err := f.write(w); err != nil {
			return err
		}
	}
	// Mirror tidwall/wal's segment cycling (Log.writeBatch) so that we know
	// which file to fsync: it starts a new segment before a batch when the
	// tail is over SegmentSize, and after any entry that brings it there.
	size := int64(w.s.opts.SegmentSize)
	if w.tailBytes > size {
		w.cycle(keep + 1)
	}
	w.batch.Clear()
	for _, r := range batch {
		for i, d := range r.data {
			idx := r.first + uint64(i)
			w.batch.Write(idx, d)
			w.tailBytes += framedSize(len(d))
			if w.tailBytes >= size {
				w.cycle(idx + 1)
			}
		}
	}
	if err := w.log.WriteBatch(&w.batch); err != nil {
		return err
	}
	if w.s.opts.Sync == SyncNone {
		return nil
	}
	return w.sync()
}

func (w *logw) cycle(start uint64) {
	w.tailStart, w.tailBytes, w.tailNew = start, 0, true
	if w.tailFile != nil {
		w.tailFile.Close()
		w.tailFile = nil
	}
}

// sync fsyncs the tail segment (and the directory when the tail is new).
// Segments before the tail were fsynced by tidwall/wal when it cycled.
func (w *logw) sync() error {
	if f := w.s.faults.Load(); f != nil && f.sync != nil {
		if err := f.sync(w); err != nil {
			return err
		}
	}
	if w.tailNew {
		if err := syncDir(w.dir); err != nil {
			return err
		}
		w.tailNew = false
	}
	if w.tailFile == nil {
		f, err := os.Open(filepath.Join(w.dir, segmentName(w.tailStart)))
		if err != nil {
			return err
		}
		w.tailFile = f
	}
	return w.tailFile.Sync()
}

// takeBackLocked undoes a failed batch: the log is cut back to keep and
// every request not committed fails with cause. mu is held, busy is set.
func (w *logw) takeBackLocked(keep uint64, cause error, batch []*wreq) {
	err := writeError(w.name, cause)
	reqs := append(batch, w.queue...)
	w.queue = nil
	w.next = keep + 1
	for _, r := range reqs {
		r.err, r.done = err, true
		w.onFail(r)
	}
	w.mu.Unlock()
	rerr := w.repair(keep)
	w.mu.Lock()
	if rerr != nil {
		w.failed = fmt.Errorf("wal: %s is unusable after a failed write (%v); reopen the store: %w", w.name, rerr, err)
		for _, r := range w.queue {
			r.err, r.done = w.failed, true
			w.onFail(r)
		}
		w.queue = nil
	}
}

// writeError wraps a write failure; ENOSPC becomes store.ErrFull.
func writeError(name string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("wal: write %s: %w: %w", name, store.ErrFull, err)
	}
	return fmt.Errorf("wal: write %s: %w", name, err)
}

// repair closes the tidwall log, cuts the files back to keep entries and
// reopens it. Only the holder of busy calls it.
func (w *logw) repair(keep uint64) error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	_ = w.log.Close() // its state is unknown after a failed write
	if w.tailFile != nil {
		w.tailFile.Close()
		w.tailFile = nil
	}
	tail, size, err := cutLog(w.dir, keep)
	if err != nil {
		return err
	}
	l, err := twal.Open(w.dir, w.s.twalOptions())
	if err != nil {
		return err
	}
	if li, _ := l.LastIndex(); li != keep {
		l.Close()
		return fmt.Errorf("log ends at %d after the cut, want %d", li, keep)
	}
	w.log = l
	w.tailStart, w.tailBytes, w.tailNew = tail.start, size, false
	return nil
}

// exclusive runs fn while no batch is being written. New requests queue
// up meanwhile.
func (w *logw) exclusive(fn func() error) error {
	w.mu.Lock()
	for w.busy {
		w.cond.Wait()
	}
	if w.failed != nil {
		w.mu.Unlock()
		return w.failed
	}
	w.busy = true
	w.mu.Unlock()
	err := fn()
	w.mu.Lock()
	w.busy = false
	w.cond.Broadcast()
	w.mu.Unlock()
	return err
}

// truncateFront drops the entries before cut. tidwall/wal rewrites the rest
// of the segment holding cut (at most SegmentSize bytes) and deletes the
// older segments; writers wait only for that.
func (w *logw) truncateFront(cut uint64) error {
	return w.exclusive(func() error {
		if cut <= w.first.Load() {
			return nil
		}
		if err := w.log.TruncateFront(cut); err != nil {
			if !errors.Is(err, twal.ErrOutOfRange) {
				w.mu.Lock()
				w.failed = fmt.Errorf("wal: %s is unusable after a failed truncation; reopen the store: %w", w.name, err)
				w.mu.Unlock()
			}
			return fmt.Errorf("wal: truncate %s: %w", w.name, err)
		}
		w.first.Store(cut)
		if cut >= w.tailStart { // the tail segment was rewritten
			fi, err := os.Stat(filepath.Join(w.dir, segmentName(cut)))
			if err != nil {
				return err
			}
			w.tailStart, w.tailBytes = cut, fi.Size()
			if w.tailFile != nil {
				w.tailFile.Close()
				w.tailFile = nil
			}
		}
		return syncDir(w.dir)
	})
}

// read returns the checked record at index.
func (w *logw) read(index uint64) ([]byte, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.readLocked(index)
}

// readLocked reads one record; rmu must be held.
func (w *logw) readLocked(index uint64) ([]byte, error) {
	p, err := w.log.Read(index)
	if err != nil {
		if errors.Is(err, twal.ErrNotFound) {
			return nil, store.ErrNotFound
		}
		if errors.Is(err, twal.ErrCorrupt) {
			return nil, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d: %v", index, err)}
		}
		return nil, fmt.Errorf("wal: read %s entry %d: %w", w.name, index, err)
	}
	if _, ok := checkRecord(p); !ok {
		return nil, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d fails its checksum", index)}
	}
	return p, nil
}

// bounds returns the first and last committed index.
func (w *logw) bounds() (first, last uint64) {
	last = w.committed.Load()
	first = w.first.Load()
	return first, last
}

// close closes the tidwall log. No request may be in flight.
func (w *logw) close() error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	if w.tailFile != nil {
		w.tailFile.Close()
		w.tailFile = nil
	}
	if err := w.log.Close(); err != nil && !errors.Is(err, twal.ErrClosed) {
		return fmt.Errorf("wal: close %s: %w", w.name, err)
	}
	return nil
}
