package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	twal "github.com/tidwall/wal"

	"pigeon/store"
)

// logw is one tidwall/wal log with a group-committing writer.
//
// Writers enqueue requests under mu and wait. Whoever finds the log idle
// becomes the leader: it takes the whole queue (one request under
// SyncAlways), writes it with one WriteBatch, fsyncs once (unless
// SyncNone), marks every request done and wakes their owners. Requests
// that arrive meanwhile form the next batch, so concurrent writers share
// one fsync and each returns only after its own records are on disk. No
// goroutine is involved: a caller is either waiting or leading.
//
// Batches are written one at a time on purpose. An fsync here costs about
// as much CPU as wall time, so overlapping the next batch's write and
// fsync with this one's only made batches smaller and fsyncs more
// numerous, and throughput lower.
//
// Wakeups are targeted: an owner sleeps on its request's own channel and is
// woken when its request is done, or when the log goes idle with its
// request at the head of the queue (it then leads the next batch); an
// owner whose request is done leaves without taking mu again. Waking
// every waiter through a cond made hundreds of goroutines queue on mu
// after each fsync, and the next leader behind them. The cond serves only
// the rare waiters on a request they do not own (waitOtherLocked) and
// exclusive.
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

	mu    sync.Mutex
	cond  sync.Cond
	next  uint64 // index of the next enqueued entry
	queue []*wreq
	// spare is the emptied array of the last batch committed, which the
	// queue takes when the next batch leaves it, instead of growing a new
	// one while the writers hold mu (SyncBatch and SyncNone).
	spare []*wreq
	busy  bool // a leader is writing, or exclusive holds the log
	// exclWaiting counts the exclusive callers waiting for busy to clear:
	// while one waits no new batch starts (mayLeadLocked), so it has the
	// log once the batch being written is done, not at a moment with no
	// batch at all, which writers under load never leave.
	exclWaiting int
	failed      error       // set when a failed write could not be taken back
	unusable    atomic.Bool // failed is set: for readers without mu
	committed   atomic.Uint64
	first       atomic.Uint64
	batches     atomic.Uint64 // batches written, for tests and benchmarks
	records     atomic.Uint64 // records those batches held

	// Owned by whoever holds busy.
	batch     twal.Batch
	tailStart uint64   // first index of the tail segment (mirrors tidwall)
	tailBytes int64    // bytes written to the tail segment (mirrors tidwall)
	tailFile  *os.File // write handle used for fsync and preallocate; nil = reopen
	tailNew   bool     // the tail segment was created since the last dir sync
	// preEnd is how far the tail segment file is preallocated (see
	// extend): its size, past tailBytes; 0 when it is not. preStep is how
	// much the next extension adds, and preOff is set once the file
	// system refused to preallocate.
	preEnd  int64
	preStep int64
	preOff  bool

	// The commit delay (Options.BatchDelay): the size of the last batch
	// and the writers in flight when it was committed (its requests and
	// those queued while it was written, all of whom come back soon when
	// they keep writing), owned by whoever holds busy; while the leader
	// waits for the queue to reach the larger (want), lingering is set
	// and enqueueLocked wakes it through filled once the queue is that
	// long.
	lastBatch int
	inFlight  int
	syncAvg   time.Duration // moving average of a batch's write and fsync
	lingering bool
	filled    chan struct{}
	delay     *time.Timer

	// onWritten, when set, runs once a batch is written (and synced),
	// with the batch's requests in index order, before its records are
	// visible to readers (committed); onCommitted and onCommit run after.
	// Mu is held. Subject logs put acceptance records in the outbox here,
	// so that nothing a reader of a message does precedes its acceptance
	// in the audit chain (see ChainAudit).
	onWritten func(batch []*wreq)
	// onCommitted, when set, runs once for a committed batch, with mu
	// held, before onCommit runs for each of its requests: the books a
	// batch keeps under one lock (subject logs).
	onCommitted func(batch []*wreq)
	onCommit    func(r *wreq) // with mu held, in index order
	onFail      func(r *wreq) // with mu held, for each request taken back
}

// wreq is one caller's request: its entries and, after it is done, the
// outcome. The owner fields carry what onCommit and onFail need.
type wreq struct {
	data  [][]byte
	first uint64      // index of data[0], set when enqueued
	done  atomic.Bool // set under mu, after err and onCommit or onFail
	err   error
	wake  chan struct{} // the owner's, set under mu; see wakeLocked

	id, key string // messages: id and idempotency key
	loc     uint64 // messages: packed location
	body    int    // messages: the body's length
	res     int    // meta: result of applying (e.g. how many removed)
	aux     any
	buf     *recBuf   // what data is encoded in, when pooled; see freeBuf
	one     [1][]byte // data of a one-record request
}

// freeBuf recycles the buffer r's data was encoded in. Call it from
// onCommit or onFail: by then WriteBatch has copied the records, or they
// will not be written.
func (r *wreq) freeBuf() {
	if r.buf != nil {
		r.buf.put()
		r.buf, r.data, r.one[0] = nil, nil, nil
	}
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
		DirPerms:         dirPerm,
		FilePerms:        filePerm,
	}
}

// openLog scans the log in dir (calling visit for every record), drops a
// torn tail (refuses it after a clean shutdown), opens the log with
// tidwall/wal and returns its writer.
func (s *Store) openLog(dir, name string, visit visitFunc) (*logw, scanStats, error) {
	fresh := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fresh = true
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return nil, scanStats{}, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	st, err := scanLog(dir, max(s.opts.MaxRecordSize, 1<<30), visit)
	if err != nil {
		return nil, st, err
	}
	if st.torn {
		if err := s.dropTornTail(name, st); err != nil {
			return nil, st, err
		}
	}
	// Preallocated space is no record and no damage after a crash:
	// tidwall/wal would read it as records, so it goes before tidwall/wal
	// opens the log. A clean shutdown cut the tail's (close), so there it
	// is damage, as a torn tail is: records zeroed out.
	if n := len(st.zeroTails); s.clean && n > 0 && st.zeroTails[n-1].path == st.tailPath {
		return nil, st, &store.CorruptError{File: st.tailPath, Offset: st.tailSize, Reason: "zero bytes after the last record after a clean shutdown"}
	}
	for _, z := range st.zeroTails {
		if err := truncateFile(z.path, z.size); err != nil {
			return nil, st, fmt.Errorf("wal: cut the preallocated space of %s: %w", z.path, err)
		}
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

// dropTornTail cuts the torn tail that a scan of log name found, records
// it for Recovered and logs it. After a clean shutdown no write was in
// progress, so the tail is damage: nothing is cut and the error is a
// *store.CorruptError, as for damage before the tail.
func (s *Store) dropTornTail(name string, st scanStats) error {
	if s.clean {
		return &store.CorruptError{File: st.tailPath, Offset: st.tailSize, Reason: st.tornReason + " after a clean shutdown"}
	}
	fi, err := os.Stat(st.tailPath)
	if err != nil {
		return fmt.Errorf("wal: drop torn tail of %s: %w", st.tailPath, err)
	}
	if err := truncateFile(st.tailPath, st.tailSize); err != nil {
		return fmt.Errorf("wal: drop torn tail of %s: %w", st.tailPath, err)
	}
	tr := store.Truncation{Log: name, File: st.tailPath, Offset: st.tailSize, Bytes: fi.Size() - st.tailSize, Reason: st.tornReason}
	s.opts.Logger.Warn("wal: dropped the torn tail of a log after a crash",
		"log", tr.Log, "file", tr.File, "offset", tr.Offset, "bytes", tr.Bytes, "reason", tr.Reason)
	s.tornMu.Lock()
	s.torn = append(s.torn, tr)
	s.tornMu.Unlock()
	return nil
}

// enqueueLocked gives r its indexes and queues it. mu must be held.
func (w *logw) enqueueLocked(r *wreq) {
	r.first = w.next
	w.next += uint64(len(r.data))
	w.queue = append(w.queue, r)
	if w.lingering && len(w.queue) >= w.want() {
		w.lingering = false
		select {
		case w.filled <- struct{}{}:
		default:
		}
	}
}

// Bounds of the adaptive commit delay (Options.BatchDelay zero).
const (
	minAdaptiveDelay   = 50 * time.Microsecond
	maxAdaptiveDelay   = 2 * time.Millisecond
	firstAdaptiveDelay = 100 * time.Microsecond
)

// batchDelay is how long a leader may wait for writers: Options.BatchDelay,
// or when that is zero the recent write-and-fsync time, clamped. Writers
// that come back within it get into this batch; the linger ends as soon
// as the queue is as long as the last batch, so a delay longer than the
// writers' turnaround costs nothing while they keep up. Half of it (the
// rule before) was shorter than an HTTP client's turnaround under load:
// the batch then split into two that took turns, each with its own fsync
// (BenchmarkAppendPublishers with think=200µs: 32-42 appends per fsync
// against 62-63 of the 64 writers now).
func (w *logw) batchDelay() time.Duration {
	if d := w.s.opts.BatchDelay; d != 0 {
		return d
	}
	if w.syncAvg == 0 {
		return firstAdaptiveDelay
	}
	return min(max(w.syncAvg, minAdaptiveDelay), maxAdaptiveDelay)
}

// want is how many requests the commit delay waits for: the writers in
// flight when the last batch was committed, its own and those that queued
// while it was written, or as many as it held (a test's). Waiting for the
// last batch's size alone let two groups of writers take turns: the
// leader of those that queued during a batch's fsync wrote them at once,
// while the writers that batch released were still on their way back,
// and each group kept its own fsync (32 HTTP clients: 17-19 publishes an
// fsync, against 23-27 waiting for the writers in flight, and 2-7% less
// CPU a publish).
func (w *logw) want() int { return max(w.lastBatch, w.inFlight) }

// lingerLocked is the commit delay: when the last batch held several
// requests, or several writers were in flight when it was committed, and
// fewer are queued, it waits up to batchDelay for as many (want). mu is
// held on entry and exit, and released while it waits; busy is set.
func (w *logw) lingerLocked() {
	if n := w.want(); w.s.opts.Sync != SyncBatch || n < 2 || len(w.queue) >= n {
		return
	}
	d := w.batchDelay()
	if d <= 0 {
		return
	}
	if w.filled == nil {
		w.filled = make(chan struct{}, 1)
		w.delay = time.NewTimer(d)
	} else {
		select {
		case <-w.filled:
		default:
		}
		w.delay.Reset(d)
	}
	w.lingering = true
	w.mu.Unlock()
	select {
	case <-w.filled:
	case <-w.delay.C:
	}
	w.delay.Stop()
	w.mu.Lock()
	w.lingering = false
}

// submit enqueues r and waits until it is committed or failed.
func (w *logw) submit(r *wreq) error {
	w.mu.Lock()
	if err := w.failed; err != nil {
		w.mu.Unlock()
		return err
	}
	w.enqueueLocked(r)
	return w.awaitLocked(r)
}

// wakeChans recycles the owners' wake channels. A channel may come back
// holding a stale token, or get one late from a committer that set done
// before it woke the owner; a stale token only makes the next owner look
// again. awaitLocked drains it before use.
var wakeChans = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// awaitLocked waits for r, which the caller enqueued and owns, leading a
// batch whenever one may be written. mu is held on entry and released on
// return. An owner woken because its request is done returns without
// taking mu again: hundreds of them leaving after one fsync would
// otherwise queue on mu, and the next leader behind them.
func (w *logw) awaitLocked(r *wreq) error {
	ch := wakeChans.Get().(chan struct{})
	select {
	case <-ch:
	default:
	}
	r.wake = ch
	defer wakeChans.Put(ch)
	for !r.done.Load() {
		if w.mayLeadLocked() {
			w.commitLocked()
			continue
		}
		w.mu.Unlock()
		<-ch
		if r.done.Load() {
			return r.err
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return r.err
}

// waitOtherLocked waits for r, a request some other caller owns (an
// idempotent retry waiting for its original). mu is held on entry and exit.
func (w *logw) waitOtherLocked(r *wreq) error {
	for !r.done.Load() {
		if w.mayLeadLocked() {
			w.commitLocked()
			continue
		}
		w.cond.Wait()
	}
	return r.err
}

// mayLeadLocked reports whether a batch may be written now: the log is
// idle, something is queued, and no exclusive caller waits for its turn
// (it goes first; idleLocked wakes the queue's head after it).
func (w *logw) mayLeadLocked() bool {
	return !w.busy && w.exclWaiting == 0 && len(w.queue) > 0
}

// wakeLocked wakes r's owner if it is waiting; a wake it does not need
// only makes it look again. mu must be held.
func (w *logw) wakeLocked(r *wreq) {
	if r.wake == nil {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default: // a token is already there
	}
}

// idleLocked marks the log idle and wakes whoever must act on it: the
// other-request waiters and exclusive (cond), and the owner of the head of
// the queue, which leads the next batch. mu must be held.
func (w *logw) idleLocked() {
	w.busy = false
	w.cond.Broadcast()
	if len(w.queue) > 0 {
		w.wakeLocked(w.queue[0])
	}
}

// commitLocked writes and syncs one batch. mu is held on entry and exit
// and released during I/O; mayLeadLocked must be true.
func (w *logw) commitLocked() {
	w.busy = true
	w.lingerLocked()
	var batch []*wreq
	if w.s.opts.Sync == SyncAlways {
		batch, w.queue = w.queue[:1:1], w.queue[1:]
	} else {
		batch, w.queue, w.spare = w.queue, w.spare, nil
	}
	keep := w.committed.Load()
	w.lastBatch = len(batch)
	w.batches.Add(1)
	w.mu.Unlock()
	n := 0
	for _, r := range batch {
		n += len(r.data)
	}
	w.records.Add(uint64(n))
	start := time.Now()
	err := w.write(batch, keep)
	if took := time.Since(start); w.syncAvg == 0 {
		w.syncAvg = took
	} else {
		w.syncAvg += (took - w.syncAvg) / 8
	}
	w.mu.Lock()
	w.inFlight = len(batch) + len(w.queue)
	if err != nil {
		w.takeBackLocked(keep, err, batch)
	} else {
		if w.onWritten != nil {
			w.onWritten(batch)
		}
		w.committed.Store(batch[len(batch)-1].last())
		if f := w.s.faults.Load(); f != nil && f.visible != nil {
			f.visible(w)
		}
		if w.onCommitted != nil {
			w.onCommitted(batch)
		}
		for _, r := range batch {
			w.onCommit(r)
			r.done.Store(true)
			w.wakeLocked(r)
		}
		if w.s.opts.Sync != SyncAlways { // a batch of one shares the queue's array
			clear(batch)
			w.spare = batch[:0]
		}
	}
	w.idleLocked()
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

// preallocate extends the tail file to size (see extend).
func (w *logw) preallocate(size int64) error {
	if f := w.s.faults.Load(); f != nil && f.prealloc != nil {
		return f.prealloc(w, size)
	}
	return preallocate(w.tailFile, size)
}

// cycle follows tidwall/wal to a new tail segment. The one left behind
// holds no preallocated space: extend stops at the segment size, which
// its records reach before tidwall/wal leaves it.
func (w *logw) cycle(start uint64) {
	w.tailStart, w.tailBytes, w.tailNew = start, 0, true
	w.closeTail()
}

// closeTail closes the tail's handle; the next sync opens the tail again,
// and preallocates it anew.
func (w *logw) closeTail() {
	if w.tailFile != nil {
		w.tailFile.Close()
		w.tailFile = nil
	}
	w.preEnd = 0
}

// cutZeroTail cuts c.path to c.size when everything after c.size is zero
// bytes, which it checks first: a cut never takes a record.
func cutZeroTail(c segCut) error {
	f, err := os.OpenFile(c.path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() <= c.size {
		return nil
	}
	if !zeroAt(f, c.size, fi.Size()) {
		return fmt.Errorf("bytes after offset %d are not preallocated space", c.size)
	}
	return f.Truncate(c.size)
}

// Preallocation (Options.NoPreallocate). An fsync of a file whose size or
// block map changed must write the file's metadata as well as the data;
// one whose writes went over blocks already written within its size need
// not. So sync extends the tail segment ahead of its writes with written
// zero bytes (preallocate): first by minPrealloc, then by twice the last
// step, up to the segment size, which bounds the space a log holds that is
// not records. The extension is made durable by the fdatasync of the batch
// that caused it; the batches after it overwrite zeros, and their
// fdatasync flushes the data alone. A clean shutdown cuts the tail back to
// its records (close); after a crash Open cuts the preallocated space off
// before tidwall/wal reads the files, and scanSegment tells it, and a
// batch the crash left with holes, from damage.
const minPrealloc = 64 << 10

// extend preallocates the tail segment when less than half a step of its
// preallocated space is left. Only the holder of busy calls it, with
// tailFile open.
func (w *logw) extend() {
	if w.preOff || w.s.opts.NoPreallocate {
		return
	}
	limit := int64(w.s.opts.SegmentSize)
	if w.preStep == 0 {
		w.preStep = min(minPrealloc, limit)
	}
	if w.preEnd-w.tailBytes >= w.preStep/2 {
		return
	}
	end := min(w.tailBytes+w.preStep, limit)
	if end <= max(w.tailBytes, w.preEnd) {
		return
	}
	if err := w.preallocate(end); err != nil {
		if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
			w.preOff = true
		}
		return
	}
	w.preEnd = end
	w.preStep = min(2*w.preStep, limit)
}

// sync makes the batch durable: it fdatasyncs the tail segment (datasync;
// the directory is fsynced when the tail is new). Segments before the tail
// were fsynced by tidwall/wal when it cycled.
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
		f, err := os.OpenFile(filepath.Join(w.dir, segmentName(w.tailStart)), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		w.tailFile = f
	}
	w.extend()
	return datasync(w.tailFile)
}

// takeBackLocked undoes what was written after keep: the log is cut back
// to keep and reqs and every queued request fail with cause. mu is held
// and busy is set; mu is released while the files are cut.
func (w *logw) takeBackLocked(keep uint64, cause error, reqs []*wreq) {
	err := writeError(w.name, cause)
	reqs = append(reqs, w.queue...)
	w.queue = nil
	w.next = keep + 1
	for _, r := range reqs {
		r.err = err
		w.onFail(r)
		r.done.Store(true)
		w.wakeLocked(r)
	}
	w.mu.Unlock()
	rerr := w.repair(keep)
	w.mu.Lock()
	if rerr != nil {
		w.failed = fmt.Errorf("wal: %s is unusable after a failed write (%v); reopen the store: %w", w.name, rerr, err)
		w.unusable.Store(true)
		for _, r := range w.queue {
			r.err = w.failed
			w.onFail(r)
			r.done.Store(true)
			w.wakeLocked(r)
		}
		w.queue = nil
	}
}

// writeError wraps a write failure; ENOSPC (isNoSpace) becomes
// store.ErrFull.
func writeError(name string, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("wal: write %s: %w: %w", name, store.ErrFull, err)
	}
	return fmt.Errorf("wal: write %s: %w", name, err)
}

// closeError wraps a failure to close a log; ENOSPC (isNoSpace) becomes
// store.ErrFull.
func closeError(name string, err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("wal: close %s: %w: %w", name, store.ErrFull, err)
	}
	return fmt.Errorf("wal: close %s: %w", name, err)
}

// repair closes the tidwall log, cuts the files back to keep entries and
// reopens it. Only the holder of busy calls it.
func (w *logw) repair(keep uint64) error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	_ = w.log.Close() // its state is unknown after a failed write
	w.closeTail()
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
	// The directory is synced again with the next batch: a failed fsync
	// may have been the one that was to make the tail's entry durable.
	w.tailStart, w.tailBytes, w.tailNew = tail.start, size, true
	return nil
}

// exclusive runs fn while no batch is being written: once the batch being
// written, if any, is done, before the next one starts. New requests queue
// up meanwhile.
func (w *logw) exclusive(fn func() error) error {
	w.mu.Lock()
	w.exclWaiting++
	for w.busy {
		w.cond.Wait()
	}
	w.exclWaiting--
	if w.failed != nil {
		w.idleLocked() // the writers that waited for this turn look again
		w.mu.Unlock()
		return w.failed
	}
	w.busy = true
	w.mu.Unlock()
	err := fn()
	w.mu.Lock()
	w.idleLocked()
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
		if cut >= w.tailStart {
			// tidwall/wal removes the tail segment and renames its rest
			// in place, which Windows refuses while any handle without
			// FILE_SHARE_DELETE (every handle Go opens) holds the file.
			w.closeTail()
		}
		err := error(nil)
		if f := w.s.faults.Load(); f != nil && f.truncate != nil {
			err = f.truncate(w)
		}
		if err == nil {
			err = w.log.TruncateFront(cut)
		}
		if err != nil {
			if !errors.Is(err, twal.ErrOutOfRange) {
				w.mu.Lock()
				w.failed = fmt.Errorf("wal: %s is unusable after a failed truncation; reopen the store: %w", w.name, err)
				w.unusable.Store(true)
				w.mu.Unlock()
			}
			return fmt.Errorf("wal: truncate %s: %w", w.name, err)
		}
		if f := w.s.faults.Load(); f != nil && f.truncated != nil {
			f.truncated(w)
		}
		w.first.Store(cut)
		if cut >= w.tailStart { // the tail segment was rewritten
			fi, err := os.Stat(filepath.Join(w.dir, segmentName(cut)))
			if err != nil {
				return err
			}
			w.tailStart, w.tailBytes = cut, fi.Size()
			w.closeTail()
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

// droppedLocked reports whether index, which the log no longer holds, was
// dropped from its front, and the first entry kept: a trim moves
// tidwall/wal's first index before w.first (truncateFront), so a read
// racing one asks the log itself. rmu must be held.
func (w *logw) droppedLocked(index uint64) (first uint64, ok bool) {
	if f := w.first.Load(); index < f {
		return f, true
	}
	f, err := w.log.FirstIndex()
	if err != nil || index >= f {
		return 0, false
	}
	return f, true
}

// bounds returns the first and last committed index.
func (w *logw) bounds() (first, last uint64) {
	last = w.committed.Load()
	first = w.first.Load()
	return first, last
}

// close closes the tidwall log, which fsyncs its tail segment, and
// fsyncs the directory when a segment was created since it was last
// synced (under SyncNone it never is before). No request may be in
// flight. A nil error means every entry of the log is on disk.
func (w *logw) close() error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	// After a clean shutdown no segment ends in preallocated space (Open
	// takes one that does for damage); tidwall/wal's final fsync makes
	// the cut durable. Whatever preEnd says: an extension that failed
	// (ENOSPC) may still have grown the file.
	if w.failed == nil {
		if err := cutZeroTail(segCut{filepath.Join(w.dir, segmentName(w.tailStart)), w.tailBytes}); err != nil {
			return closeError(w.name, err)
		}
	}
	w.closeTail()
	var ferr error
	if f := w.s.faults.Load(); f != nil && f.sync != nil {
		ferr = f.sync(w) // the final fsync fails
	}
	if err := w.log.Close(); err != nil && !errors.Is(err, twal.ErrClosed) {
		return closeError(w.name, err)
	}
	if ferr != nil {
		return closeError(w.name, ferr)
	}
	if w.tailNew {
		if err := syncDir(w.dir); err != nil {
			return closeError(w.name, err)
		}
		w.tailNew = false
	}
	return nil
}
