package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pigeon/store"
)

// Audit: the hash-chained records live in their own log, entry index ==
// record Seq. Memory holds the last record and the checkpoint. Retention
// writes the checkpoint (seq and hash of the last removed record) to
// audit.checkpoint before it truncates the front, so verification on open
// starts from it.

type auditLog struct {
	w      *logw
	mu     sync.Mutex
	head   store.AuditRecord // last committed record (zero when none is retained)
	pend   store.Checkpoint  // head including queued records
	cp     store.Checkpoint
	trimMu sync.Mutex
}

func auditDir(dir string) string       { return filepath.Join(dir, "audit") }
func checkpointPath(dir string) string { return filepath.Join(dir, "audit.checkpoint") }
func headOf(r store.AuditRecord) store.Checkpoint {
	return store.Checkpoint{Seq: r.Seq, Hash: r.Hash}
}

func readCheckpoint(dir string) (store.Checkpoint, error) {
	cp, _, err := readCheckpointFloors(dir)
	return cp, err
}

// readCheckpointFloors reads the checkpoint and the acceptance floors
// kept with it (nil when it has none).
func readCheckpointFloors(dir string) (store.Checkpoint, map[string]uint64, error) {
	path := checkpointPath(dir)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return store.Checkpoint{}, nil, nil
	}
	var cp store.Checkpoint
	var floors map[string]uint64
	n := 0
	err := readFramedFile(path, 1<<28, func(off int64, rec []byte) error {
		if n > 0 {
			return errors.New("more than one checkpoint")
		}
		n++
		var err error
		cp, floors, err = decodeCheckpointFloors(rec)
		return err
	})
	if err == nil && n == 0 {
		err = &store.CorruptError{File: path, Offset: 0, Reason: "empty checkpoint file"}
	}
	return cp, floors, err
}

// auditScan verifies records as a scan visits them.
type auditScan struct {
	cp    store.Checkpoint
	v     store.Verifier
	head  store.AuditRecord
	each  func(*store.AuditRecord) error
	count uint64
}

func newAuditScan(cp store.Checkpoint, each func(*store.AuditRecord) error) *auditScan {
	return &auditScan{cp: cp, v: store.Verifier{From: cp}, each: each}
}

func (a *auditScan) visit(index uint64, _ string, _ int64, rec []byte) error {
	r, err := decodeAudit(rec)
	if err != nil {
		return err
	}
	if r.Seq != index {
		return &store.ChainError{Seq: r.Seq, Reason: fmt.Sprintf("record stored at position %d", index)}
	}
	if index <= a.cp.Seq {
		// Retention wrote the checkpoint but had not truncated yet.
		if index == a.cp.Seq && r.Hash != a.cp.Hash {
			return &store.ChainError{Seq: r.Seq, Reason: "hash does not match the checkpoint"}
		}
		return nil
	}
	if err := a.v.Next(&r); err != nil {
		return err
	}
	a.head = r
	a.count++
	if a.each != nil {
		return a.each(&r)
	}
	return nil
}

// finish checks what only the whole scan can tell: no records missing
// between the checkpoint and the first record.
func (a *auditScan) finish(st scanStats) error {
	if st.last < a.cp.Seq {
		return &store.ChainError{Seq: a.cp.Seq, Reason: fmt.Sprintf("log ends at %d, before the checkpoint", st.last)}
	}
	if st.last < st.first && st.first != a.cp.Seq+1 {
		return &store.ChainError{Seq: st.first, Reason: fmt.Sprintf("empty log starts at %d, want %d after the checkpoint", st.first, a.cp.Seq+1)}
	}
	return nil
}

// loadAudit opens and verifies the audit log, calling each for every
// record after the checkpoint.
func (s *Store) loadAudit(each func(*store.AuditRecord) error) error {
	a := &s.audit
	cp, err := readCheckpoint(s.dir)
	if err != nil {
		return err
	}
	sc := newAuditScan(cp, each)
	w, st, err := s.openLog(auditDir(s.dir), "audit", sc.visit)
	if err == nil {
		a.w = w
		err = sc.finish(st)
	}
	if err != nil {
		if errors.Is(err, store.ErrTampered) {
			return fmt.Errorf("wal: open %s: %w", s.dir, err)
		}
		return err
	}
	a.cp, a.head = cp, sc.head
	a.pend = cp
	if sc.head.Seq != 0 {
		a.pend = headOf(sc.head)
	}
	w.onCommit = func(r *wreq) {
		r.freeBuf()
		a.mu.Lock()
		switch x := r.aux.(type) {
		case *store.AuditRecord:
			a.head = *x
		case *auditAux:
			a.head = x.last
		}
		a.mu.Unlock()
		if x, ok := r.aux.(*auditAux); ok {
			s.onAuditCommit(x)
		}
	}
	w.onFail = func(r *wreq) {
		r.freeBuf()
		if x, ok := r.aux.(*auditAux); ok {
			s.onAuditFail(x)
		}
		a.mu.Lock()
		a.pend = a.cp
		if a.head.Seq != 0 {
			a.pend = headOf(a.head)
		}
		a.mu.Unlock()
	}
	return nil
}

// finishAuditTrim finishes a retention that a crash cut short between
// writing the checkpoint and truncating the log (loadAudit skipped the
// records up to the checkpoint).
func (s *Store) finishAuditTrim() error {
	a := &s.audit
	if a.w.first.Load() > a.cp.Seq {
		return nil
	}
	return a.w.truncateFront(a.cp.Seq + 1)
}

// AppendAudit implements store.AuditLog. The records must continue the
// chain (sequence and hashes); one that does not is refused with an error
// matching store.ErrTampered, since Open would refuse it later. Their
// times are kept in UTC.
func (s *Store) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if len(recs) == 0 {
		return nil
	}
	a := &s.audit
	w := a.w
	w.mu.Lock()
	if err := w.failed; err != nil {
		w.mu.Unlock()
		return err
	}
	a.mu.Lock()
	buf := getRecBuf()
	fail := func(err error) error {
		a.mu.Unlock()
		w.mu.Unlock()
		buf.put()
		return fmt.Errorf("wal: append audit: %w", err)
	}
	if recs[0].Seq != w.next {
		return fail(fmt.Errorf("seq %d but the log is at %d", recs[0].Seq, w.next))
	}
	v := store.Verifier{From: a.pend}
	ends := make([]int, len(recs))
	var last store.AuditRecord
	for i := range recs {
		// Kept in UTC, as the Verifier requires of a stored record (the
		// hash covers the instant alone, which the zone does not change).
		last = recs[i]
		last.Time = last.Time.UTC()
		if err := v.Next(&last); err != nil {
			return fail(err)
		}
		buf.b = appendAudit(buf.b, &last)
		ends[i] = len(buf.b)
	}
	a.pend = v.Head()
	a.mu.Unlock()
	data := make([][]byte, len(recs))
	start := 0
	for i, end := range ends {
		data[i] = buf.b[start:end:end]
		start = end
	}
	r := &wreq{data: data, aux: &last, buf: buf}
	w.enqueueLocked(r)
	return w.awaitLocked(r)
}

// ReadAudit implements store.AuditLog.
// It first chains the acceptance records of messages already appended
// (AppendAccepted), so that they are read too.
func (s *Store) ReadAudit(ctx context.Context, from uint64, max int) ([]store.AuditRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.flushLogged()
	w := s.audit.w
	first, last := w.bounds()
	from = maxU(from, first)
	if from > last {
		return nil, nil
	}
	if max <= 0 {
		max = math.MaxInt
	}
	out := make([]store.AuditRecord, 0, min(uint64(max), last-from+1, 1024))
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for seq := from; seq <= last && len(out) < max; seq++ {
		p, err := w.readLocked(seq)
		if errors.Is(err, store.ErrNotFound) {
			if first, ok := w.droppedLocked(seq); ok { // trimmed meanwhile
				seq = first - 1
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		r, err := decodeAudit(p)
		if err != nil || r.Seq != seq {
			return nil, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d is not audit record %d (%v)", seq, seq, err)}
		}
		out = append(out, r)
		if seq == math.MaxUint64 {
			break // the last sequence there is: the one after it would be 0
		}
	}
	return out, nil
}

// AuditHead implements store.AuditLog. Like ReadAudit it first chains
// the acceptance records of messages already appended.
func (s *Store) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if err := s.enter(ctx); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	defer s.leave()
	s.flushLogged()
	s.audit.mu.Lock()
	defer s.audit.mu.Unlock()
	return s.audit.head, s.audit.cp, nil
}

// TrimAuditBefore implements store.AuditTrimmer: it removes audit records
// with a Time before t from the front of the log and returns how many. The checkpoint of the last
// removed record is made durable first, so AuditHead reports it and the
// remainder still verifies, now and after a restart.
func (s *Store) TrimAuditBefore(ctx context.Context, t time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	a := &s.audit
	a.trimMu.Lock()
	defer a.trimMu.Unlock()
	w := a.w
	first, last := w.bounds()
	if last == math.MaxUint64 {
		// Only a forged log gets there. The log cannot be cut (the entry
		// after its last would be 0), and a checkpoint written before a
		// cut that fails would leave a trim that every Open retries: the
		// log is left whole.
		return 0, fmt.Errorf("wal: audit log ends at sequence %d, the last there is, and cannot be trimmed", last)
	}
	cut := first
	var prev store.AuditRecord
	for ; cut <= last; cut++ {
		p, err := w.read(cut)
		if err != nil {
			return 0, err
		}
		r, err := decodeAudit(p)
		if err != nil {
			return 0, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d: %v", cut, err)}
		}
		if !r.Time.Before(t) {
			break
		}
		prev = r
	}
	if cut == first {
		return 0, nil
	}
	cp := headOf(prev)
	// The subjects' acceptance floors, taken now, go with the checkpoint:
	// every kind-4 message up to its floor has its acceptance record
	// committed, and the record of any later one will be committed after
	// this moment, so after last, which the cut does not pass. Recovery
	// thus never takes a record this trim removed for a missing one.
	floors := s.acceptFloors()
	if err := writeFileAtomic(checkpointPath(s.dir), frame(nil, encodeCheckpointFloors(cp, floors))); err != nil {
		return 0, writeError("audit checkpoint", err)
	}
	a.mu.Lock()
	a.cp = cp
	if a.head.Seq < cut {
		a.head = store.AuditRecord{}
	}
	a.mu.Unlock()
	if err := w.truncateFront(cut); err != nil {
		return 0, err
	}
	return int(cut - first), nil
}

// VerifyAudit verifies the audit chain of the store in dir without
// opening it: it reads the files only (no lock is taken and nothing is
// written, so it may run beside a live broker; a record being written at
// that moment is ignored as a torn tail). It returns how many records
// verified after the checkpoint. A broken chain is an error matching
// store.ErrTampered, damaged records store.ErrCorrupt; so is a bad last
// record when the store was shut down cleanly and stayed closed while
// VerifyAudit read it, as Open would refuse it.
func VerifyAudit(dir string) (uint64, error) {
	sc, err := scanAuditDir(dir, nil)
	if err != nil {
		return 0, err
	}
	return sc.count, nil
}

// ExportAudit writes the audit records of the store in dir to out as JSON
// lines (one store.AuditRecord each, oldest first), verifying the chain as
// it goes: it stops with an error matching store.ErrTampered at the first
// record that does not verify. Like VerifyAudit it only reads.
func ExportAudit(dir string, out io.Writer) error {
	enc := json.NewEncoder(out)
	_, err := scanAuditDir(dir, func(r *store.AuditRecord) error { return enc.Encode(r) })
	return err
}

// ScanAudit calls each with the audit records of the store in dir, oldest
// first, verifying the chain as it goes: it stops with an error matching
// store.ErrTampered at the first record that does not verify, or with
// each's error. Like VerifyAudit it only reads.
func ScanAudit(dir string, each func(*store.AuditRecord) error) error {
	_, err := scanAuditDir(dir, each)
	return err
}

func scanAuditDir(dir string, each func(*store.AuditRecord) error) (*auditScan, error) {
	if _, err := os.Stat(auditDir(dir)); err != nil {
		return nil, fmt.Errorf("wal: %s holds no audit log: %w", dir, err)
	}
	cp, err := readCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	stamp := cleanStamp(dir)
	sc := newAuditScan(cp, each)
	st, err := scanLog(auditDir(dir), (*Options)(nil).withDefaults().MaxRecordSize, sc.visit)
	if err == nil && st.torn && stamp != "" && cleanStamp(dir) == stamp {
		err = &store.CorruptError{File: st.tailPath, Offset: st.tailSize, Reason: st.tornReason + " after a clean shutdown"}
	}
	if err == nil {
		err = sc.finish(st)
	}
	if err != nil {
		if errors.Is(err, store.ErrTampered) {
			return nil, fmt.Errorf("wal: verify %s: %w", dir, err)
		}
		return nil, err
	}
	return sc, nil
}
