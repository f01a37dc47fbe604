package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// SyncMode says when an acknowledged write is on disk.
type SyncMode int

const (
	// SyncBatch (the default) is group commit: concurrent writers share one
	// fsync and each returns only after its own record is on disk.
	SyncBatch SyncMode = iota
	// SyncAlways writes and fsyncs every request on its own before
	// returning; requests to one log are serialised.
	SyncAlways
	// SyncNone never fsyncs (tidwall/wal still fsyncs a segment when it
	// starts the next). A returned write survives the process crashing but
	// the last writes are lost if the machine crashes or loses power.
	SyncNone
)

// String names the mode: "batch", "always" or "none".
func (m SyncMode) String() string {
	switch m {
	case SyncBatch:
		return "batch"
	case SyncAlways:
		return "always"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncMode(%d)", int(m))
}

// Options configure Open. A nil *Options means the defaults; Open copies
// the value and never changes the caller's.
type Options struct {
	// Sync is the durability mode. The zero value is SyncBatch.
	Sync SyncMode
	// SegmentSize is the target size of a segment file. tidwall/wal keeps
	// the tail segment of every open log in memory, and up to two more
	// segments per log as a read cache, so this bounds memory per subject.
	// Default 1 MiB.
	SegmentSize int
	// MaxRecordSize bounds one record (a message body plus its header).
	// Default 32 MiB.
	MaxRecordSize int
	// CompactAfter is how many metadata records (progress, contracts, KV)
	// may accumulate before the metadata log is compacted into a
	// snapshot. Default 65536.
	CompactAfter int
	// BatchDelay is SyncBatch's commit delay. When the previous batch of a
	// log held several requests and fewer are queued now, the leader waits
	// up to BatchDelay for as many to arrive before it writes, so that one
	// fsync covers more of them: under many concurrent writers this trades
	// at most BatchDelay of latency for fewer fsyncs, which cost CPU as
	// well as time. A lone writer is never delayed. The default (zero)
	// adapts to the disk: the log's recent write-and-fsync time, between
	// 50µs and 2ms (100µs before the first fsync), since a writer that
	// comes back within one fsync is cheaper to wait for than to leave to
	// the next one, which would take turns with this batch. A negative
	// value disables it.
	BatchDelay time.Duration
	// Now is the clock that stamps each write of a consumer group's
	// progress, for PruneGroups (default time.Now).
	Now func() time.Time
	// Logger receives what recovery did (a torn tail dropped after a
	// crash: log, file, offset and bytes). Default slog.Default().
	Logger *slog.Logger
	// NoPreallocate turns preallocation off. By default (on Linux) each
	// log's tail segment is extended ahead of its writes with written
	// zero bytes, 64 KiB at first and up to SegmentSize, so that the
	// fdatasync of a batch flushes its data alone, with no new file size
	// or block map (on ext4, half the time and CPU of a sync after a
	// 4 KiB write), for one write of zeros per byte of records (on a
	// copy-on-write file system, which allocates anew on every write, it
	// buys nothing). Preallocated space is cut off when the segment is
	// left behind and when the log is opened.
	NoPreallocate bool

	faults *faults // tests: hooks in place from the start of Open
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.SegmentSize <= 0 {
		c.SegmentSize = 1 << 20
	}
	if c.MaxRecordSize <= 0 {
		c.MaxRecordSize = 32 << 20
	}
	if c.CompactAfter <= 0 {
		c.CompactAfter = 65536
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Store is the durable store.Store. Create it with Open.
type Store struct {
	dir  string
	opts Options
	lock *os.File

	life   sync.RWMutex
	closed bool
	ops    sync.WaitGroup

	faults atomic.Pointer[faults]
	clean  bool // Open found the clean-shutdown marker; set before load
	tornMu sync.Mutex
	torn   []store.Truncation

	msgs  messages
	meta  metaLog
	quar  quarantine
	audit auditLog
	kept  keptLog // copies of trimmed messages with live idempotency claims
	out   outbox  // acceptance records on their way to the audit log

	quit chan struct{}
	bg   sync.WaitGroup
}

// faults are test hooks: a non-nil error from write or sync makes that
// write or fsync fail as if the disk had returned it.
type faults struct {
	write    func(w *logw) error
	sync     func(w *logw) error
	truncate func(w *logw) error // before a truncation of the front
	// prealloc runs in place of preallocate (extend): the file system's
	// answer to an extension.
	prealloc func(w *logw, size int64) error
	// truncated runs after tidwall/wal dropped the front, before the log
	// records its new first entry.
	truncated func(w *logw)
	// visible runs once a batch's records are visible to readers
	// (committed), before onCommit, with the log's mu held: a reader's
	// first moment.
	visible func(w *logw)
	// linger, when set, is the accept flusher's acceptLinger.
	linger time.Duration
}

var (
	_ store.Store             = (*Store)(nil)
	_ store.Trimmer           = (*Store)(nil)
	_ store.SeqTrimmer        = (*Store)(nil)
	_ store.ByteTrimmer       = (*Store)(nil)
	_ store.AuditTrimmer      = (*Store)(nil)
	_ store.QuarantineTrimmer = (*Store)(nil)
	_ store.RecoveryReporter  = (*Store)(nil)
	_ store.AuditChainer      = (*Store)(nil)
	_ store.AcceptAppender    = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir and recovers it: every
// record is checked, the indexes are rebuilt and the audit chain is
// verified. After a crash a torn last record is dropped (logged, and
// listed by Recovered); after a clean shutdown (Close left its marker)
// nothing may be torn. Open fails with an error that matches
// store.ErrLocked when another process holds dir, store.ErrCorrupt (a
// *store.CorruptError) when a record before the tail is damaged, or the
// tail is after a clean shutdown, and store.ErrTampered when the audit
// chain does not verify. The marker is removed once every log is checked,
// before Open writes anything (recovery may chain acceptance records,
// finish an audit trim, compact the kept copies), and kept when the
// checks fail.
func Open(dir string, opts *Options) (*Store, error) {
	o := opts.withDefaults()
	switch o.Sync {
	case SyncBatch, SyncAlways, SyncNone:
	default:
		return nil, fmt.Errorf("wal: unknown sync mode %d", int(o.Sync))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: data directory %q: %w", dir, err)
	}
	dir = abs
	if err := mkdirDurable(dir); err != nil {
		return nil, fmt.Errorf("wal: create data directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	if err := probeWritable(dir); err != nil {
		unlock(lock)
		return nil, fmt.Errorf("wal: data directory %s is not writable: %w", dir, err)
	}
	clean, err := readClean(dir)
	if err != nil {
		unlock(lock)
		return nil, fmt.Errorf("wal: read the clean-shutdown marker of %s: %w", dir, err)
	}
	s := &Store{dir: dir, opts: o, lock: lock, clean: clean, quit: make(chan struct{})}
	if o.faults != nil {
		s.faults.Store(o.faults)
	}
	s.out.kick = make(chan struct{}, 1)
	err = s.load()
	if err != nil {
		s.closeLogs()
		unlock(lock)
		return nil, err
	}
	s.bg.Add(2)
	go s.compactLoop()
	go s.acceptLoop()
	return s, nil
}

func probeWritable(dir string) error {
	p := filepath.Join(dir, ".probe")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, filePerm)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte("probe"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(p); err == nil {
		err = rerr
	}
	return err
}

// load checks every log and rebuilds the indexes, then removes the
// clean-shutdown marker, then makes the writes recovery needs. A crash
// during those writes may leave a torn tail, which only the absence of
// the marker lets the next Open drop; and an Open refused for damage
// found by the checks keeps the marker, so it is refused again.
func (s *Store) load() error {
	if err := s.loadMeta(); err != nil {
		return err
	}
	if err := s.loadQuarantine(); err != nil {
		return err
	}
	// Messages before the audit log: the audit scan looks for the
	// acceptance records of the last kindAccepted messages, and those it
	// does not find are chained once the audit log is open.
	floors, err := s.loadMessages()
	if err != nil {
		return err
	}
	_, cpFloors, err := readCheckpointFloors(s.dir)
	if err != nil {
		return err
	}
	cands, err := s.acceptCandidates(floors, cpFloors)
	if err != nil {
		return err
	}
	if err := s.loadAudit(foundAccepted(cands)); err != nil {
		return err
	}
	if s.clean {
		if err := removeClean(s.dir); err != nil {
			return fmt.Errorf("wal: remove the clean-shutdown marker of %s: %w", s.dir, err)
		}
	}
	if err := s.finishAuditTrim(); err != nil {
		return err
	}
	if err := s.compactKept(); err != nil {
		// Only room is at stake: the copies stay, and the next trim
		// compacts again.
		s.opts.Logger.Warn("wal: the kept copies of trimmed messages could not be compacted", "err", err)
	}
	return s.restoreAccepted(cands)
}

// Dir is the data directory.
func (s *Store) Dir() string { return s.dir }

// Recovered implements store.RecoveryReporter: the torn tails Open
// dropped after a crash, one per log, each also logged to
// Options.Logger. It is empty when the store was shut down cleanly.
func (s *Store) Recovered() []store.Truncation {
	s.tornMu.Lock()
	defer s.tornMu.Unlock()
	return append([]store.Truncation(nil), s.torn...)
}

// enter admits one operation; leave ends it. Close waits for admitted
// operations.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return store.ErrClosed
	}
	s.ops.Add(1)
	return nil
}

func (s *Store) leave() { s.ops.Done() }

// Close waits for operations in flight, stops the compactor, closes every
// log (tidwall/wal fsyncs each tail), records the clean shutdown and
// releases the directory lock. The clean-shutdown marker is written only
// when every log closed without error and none was left unusable by a
// failed write; otherwise the next Open recovers as after a crash. Close
// is idempotent, and the store is closed even when it returns an error;
// ctx is not consulted once closing has begun, since the operations it
// waits for are bounded by disk I/O.
func (s *Store) Close(ctx context.Context) error {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return nil
	}
	s.closed = true
	s.life.Unlock()
	s.ops.Wait()
	close(s.quit)
	s.bg.Wait()
	err := s.closeLogs()
	if err == nil && s.healthy() {
		if werr := writeClean(s.dir, time.Now()); werr != nil {
			err = writeError("clean-shutdown marker", werr)
		}
	}
	unlock(s.lock)
	return err
}

// healthy reports whether every log is usable: none was left in an
// unknown state by a write or truncation that could not be taken back.
func (s *Store) healthy() bool {
	logs := []*logw{s.meta.w, s.quar.w, s.audit.w, s.kept.w}
	for _, sub := range s.msgs.list {
		logs = append(logs, sub.w)
	}
	for _, w := range logs {
		if w == nil {
			return false
		}
		w.mu.Lock()
		failed := w.failed
		w.mu.Unlock()
		if failed != nil {
			return false
		}
	}
	return true
}

func (s *Store) closeLogs() error {
	var errs []error
	for _, w := range s.msgs.list {
		errs = append(errs, w.w.close())
	}
	for _, w := range []*logw{s.meta.w, s.quar.w, s.audit.w, s.kept.w} {
		if w != nil {
			errs = append(errs, w.close())
		}
	}
	return errors.Join(errs...)
}
