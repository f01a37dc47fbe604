package wal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"pigeon/store"
)

// Metadata: progress, contracts and KV live in memory and in the meta log,
// one record per change, replayed on open. Every change is applied to
// memory only once its record is committed (onCommit runs the same apply
// as replay), so memory never holds what the disk does not. When the log
// has grown by CompactAfter records the compactor writes the whole state
// to meta.snapshot (atomically) and truncates the log front.

type metaLog struct {
	w *logw

	mu        sync.RWMutex // guards the state below
	groups    map[store.GroupKey]*store.GroupState
	contracts map[string]store.ContractRecord
	kv        map[string]map[string][]byte
	applied   uint64 // index of the last applied record

	since    uint64 // records since the snapshot; under w.mu
	snapSize uint64 // records in the last snapshot; under w.mu
	compact  chan struct{}
}

func (s *Store) metaDir() string      { return filepath.Join(s.dir, "meta") }
func (s *Store) snapshotPath() string { return filepath.Join(s.dir, "meta.snapshot") }

func (m *metaLog) init() {
	m.groups = make(map[store.GroupKey]*store.GroupState)
	m.contracts = make(map[string]store.ContractRecord)
	m.kv = make(map[string]map[string][]byte)
	m.compact = make(chan struct{}, 1)
}

// apply applies one checked record; m.mu is held (or we are loading).
func (m *metaLog) apply(rec []byte) (int, error) {
	d := newDec(rec)
	res := 0
	switch rec[4] {
	case kindDone:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		seq := d.uvarint()
		if d.err == nil {
			m.group(key).MarkDone(seq)
		}
	case kindAttempt:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		seq := d.uvarint()
		n := d.varint()
		if d.err == nil {
			m.group(key).MarkAttempt(seq, int(n))
		}
	case kindGroupState:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		g := &store.GroupState{Floor: d.uvarint(), Attempts: map[uint64]int{}}
		prev := g.Floor
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			prev += d.uvarint()
			g.Done = append(g.Done, prev)
		}
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			seq := d.uvarint()
			g.Attempts[seq] = int(d.varint())
		}
		if d.err == nil {
			m.groups[key] = g
		}
	case kindContract:
		c := decodeContract(d)
		if d.err == nil {
			m.contracts[c.ID] = c
		}
	case kindContractGC:
		t := d.time()
		if d.err == nil {
			for id, c := range m.contracts {
				if c.ExpiresAt.Before(t) {
					delete(m.contracts, id)
					res++
				}
			}
		}
	case kindKVPut:
		bucket, key, val := d.str(), d.str(), d.bytes()
		if d.err == nil {
			b := m.kv[bucket]
			if b == nil {
				b = make(map[string][]byte)
				m.kv[bucket] = b
			}
			if val == nil {
				val = []byte{}
			}
			b[key] = val
		}
	case kindKVDelete:
		bucket, key := d.str(), d.str()
		if d.err == nil {
			delete(m.kv[bucket], key)
			if len(m.kv[bucket]) == 0 {
				delete(m.kv, bucket)
			}
		}
	default:
		return 0, fmt.Errorf("unexpected record kind %d in metadata", rec[4])
	}
	return res, d.done()
}

func (m *metaLog) group(key store.GroupKey) *store.GroupState {
	g := m.groups[key]
	if g == nil {
		g = &store.GroupState{Attempts: map[uint64]int{}}
		m.groups[key] = g
	}
	return g
}

func (s *Store) loadMeta() error {
	m := &s.meta
	m.init()
	var snapN uint64
	hasSnap := false
	path := s.snapshotPath()
	if _, err := os.Stat(path); err == nil {
		hasSnap = true
		first := true
		err := readFramedFile(path, 1<<31-1, func(off int64, rec []byte) error {
			if first {
				first = false
				if rec[4] != kindSnapshot {
					return errors.New("snapshot does not start with its header")
				}
				d := newDec(rec)
				snapN = d.uvarint()
				return d.done()
			}
			m.snapSize++
			_, err := m.apply(rec)
			return err
		})
		if err != nil {
			return err
		}
		if first {
			return &store.CorruptError{File: path, Offset: 0, Reason: "empty snapshot"}
		}
	}
	w, st, err := s.openLog(s.metaDir(), "meta", func(index uint64, _ string, _ int64, rec []byte) error {
		if index <= snapN {
			return nil
		}
		_, err := m.apply(rec)
		return err
	})
	if err != nil {
		return err
	}
	m.w = w
	switch {
	case hasSnap && (st.first > snapN+1 || st.last < snapN):
		return &store.CorruptError{File: s.metaDir(), Offset: -1,
			Reason: fmt.Sprintf("log holds %d..%d but the snapshot covers up to %d", st.first, st.last, snapN)}
	case !hasSnap && st.first != 1:
		return &store.CorruptError{File: s.metaDir(), Offset: -1,
			Reason: fmt.Sprintf("log starts at %d and there is no snapshot", st.first)}
	}
	m.applied = st.last
	m.since = st.last - max(snapN, st.first-1)
	w.onCommit = func(r *wreq) {
		m.mu.Lock()
		for _, d := range r.data {
			n, _ := m.apply(d) // we encoded it: it decodes
			r.res += n
		}
		m.applied = r.last()
		m.mu.Unlock()
		m.since += uint64(len(r.data))
		// Compact after CompactAfter records, and never more often than
		// the snapshot is large, so that a large state is not rewritten
		// over and over.
		if m.since >= max(uint64(s.opts.CompactAfter), m.snapSize) {
			select {
			case m.compact <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// compactLoop runs compactions when the meta log asks, until Close.
func (s *Store) compactLoop() {
	defer s.bg.Done()
	for {
		select {
		case <-s.quit:
			return
		case <-s.meta.compact:
			_ = s.compactMeta() // a failure leaves the log as it was; the next trigger retries
		}
	}
}

// compactMeta writes the state as of the last applied record to
// meta.snapshot and drops the log entries it covers.
func (s *Store) compactMeta() error {
	m := &s.meta
	m.mu.RLock()
	n := m.applied
	data := m.encodeSnapshot(n)
	records := uint64(len(m.groups) + len(m.contracts))
	for _, b := range m.kv {
		records += uint64(len(b))
	}
	m.mu.RUnlock()
	if err := writeFileAtomic(s.snapshotPath(), data); err != nil {
		return err
	}
	if err := m.w.truncateFront(n + 1); err != nil {
		return err
	}
	m.w.mu.Lock()
	m.since = m.w.committed.Load() - n
	m.snapSize = records
	m.w.mu.Unlock()
	return nil
}

func (m *metaLog) encodeSnapshot(n uint64) []byte {
	e := newEnc(kindSnapshot, 16)
	e.uvarint(n)
	out := frame(nil, e.finish())
	for key, g := range m.groups {
		e := newEnc(kindGroupState, 64+8*len(g.Done)+12*len(g.Attempts))
		e.str(key.Subject)
		e.str(key.Group)
		e.uvarint(g.Floor)
		e.uvarint(uint64(len(g.Done)))
		prev := g.Floor
		for _, seq := range g.Done {
			e.uvarint(seq - prev)
			prev = seq
		}
		e.uvarint(uint64(len(g.Attempts)))
		for seq, n := range g.Attempts {
			e.uvarint(seq)
			e.varint(int64(n))
		}
		out = frame(out, e.finish())
	}
	for _, c := range m.contracts {
		out = frame(out, encodeContract(&c))
	}
	for bucket, b := range m.kv {
		for key, val := range b {
			out = frame(out, encodeKVPut(bucket, key, val))
		}
	}
	return out
}

func encodeKVPut(bucket, key string, val []byte) []byte {
	e := newEnc(kindKVPut, len(bucket)+len(key)+len(val)+8)
	e.str(bucket)
	e.str(key)
	e.bytes(val)
	return e.finish()
}

// metaWrite commits records to the meta log and returns what applying
// them reported.
func (s *Store) metaWrite(recs ...[]byte) (int, error) {
	r := &wreq{data: recs}
	if err := s.meta.w.submit(r); err != nil {
		return 0, err
	}
	return r.res, nil
}

// MarkDone implements store.ProgressLog.
func (s *Store) MarkDone(ctx context.Context, key store.GroupKey, seq uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	noop := seq == 0 || g != nil && g.IsDone(seq)
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	e := newEnc(kindDone, len(key.Subject)+len(key.Group)+16)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	_, err := s.metaWrite(e.finish())
	return err
}

// MarkDoneBatch implements store.BatchProgress: every sequence in one
// commit.
func (s *Store) MarkDoneBatch(ctx context.Context, key store.GroupKey, seqs []uint64) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	recs := make([][]byte, 0, len(seqs))
	for _, seq := range seqs {
		if seq == 0 || g != nil && g.IsDone(seq) {
			continue
		}
		e := newEnc(kindDone, len(key.Subject)+len(key.Group)+16)
		e.str(key.Subject)
		e.str(key.Group)
		e.uvarint(seq)
		recs = append(recs, e.finish())
	}
	s.meta.mu.RUnlock()
	if len(recs) == 0 {
		return nil
	}
	_, err := s.metaWrite(recs...)
	return err
}

var _ store.BatchProgress = (*Store)(nil)

// MarkAttempt implements store.ProgressLog. An attempt recorded before a
// crash stays recorded; the broker treats its lease as expired.
func (s *Store) MarkAttempt(ctx context.Context, key store.GroupKey, seq uint64, n int) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	g := s.meta.groups[key]
	noop := false
	if g != nil {
		a, ok := g.Attempts[seq]
		noop = g.IsDone(seq) || ok && a == n
	}
	s.meta.mu.RUnlock()
	if noop {
		return nil
	}
	e := newEnc(kindAttempt, len(key.Subject)+len(key.Group)+24)
	e.str(key.Subject)
	e.str(key.Group)
	e.uvarint(seq)
	e.varint(int64(n))
	_, err := s.metaWrite(e.finish())
	return err
}

// LoadGroup implements store.ProgressLog.
func (s *Store) LoadGroup(ctx context.Context, key store.GroupKey) (store.GroupState, error) {
	if err := s.enter(ctx); err != nil {
		return store.GroupState{}, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	g := s.meta.groups[key]
	if g == nil {
		return store.GroupState{}, nil
	}
	st := store.GroupState{Floor: g.Floor}
	if len(g.Done) > 0 {
		st.Done = slices.Clone(g.Done)
	}
	if len(g.Attempts) > 0 {
		st.Attempts = maps.Clone(g.Attempts)
	}
	return st, nil
}

// PutContract implements store.ContractLog.
func (s *Store) PutContract(ctx context.Context, c store.ContractRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if c.ID == "" {
		return errors.New("wal: put contract: empty id")
	}
	_, err := s.metaWrite(encodeContract(&c))
	return err
}

// GetContract implements store.ContractLog.
func (s *Store) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	if err := s.enter(ctx); err != nil {
		return store.ContractRecord{}, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	c, ok := s.meta.contracts[id]
	s.meta.mu.RUnlock()
	if !ok {
		return store.ContractRecord{}, store.ErrNotFound
	}
	c.Body = cloneBytes(c.Body)
	return c, nil
}

// DeleteExpiredContracts implements store.ContractLog.
func (s *Store) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	any := false
	for _, c := range s.meta.contracts {
		if c.ExpiresAt.Before(t) {
			any = true
			break
		}
	}
	s.meta.mu.RUnlock()
	if !any {
		return 0, nil
	}
	e := newEnc(kindContractGC, 16)
	e.time(t)
	return s.metaWrite(e.finish())
}

var _ store.ContractLister = (*Store)(nil)

// ListContracts implements store.ContractLister: copies of the contracts
// whose ExpiresAt is after t, revoked ones included, ordered by ID. It reads
// the committed metadata, which is what Open rebuilds after a restart.
func (s *Store) ListContracts(ctx context.Context, t time.Time) ([]store.ContractRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	var out []store.ContractRecord
	s.meta.mu.RLock()
	for _, c := range s.meta.contracts {
		if c.ExpiresAt.After(t) {
			c.Body = cloneBytes(c.Body)
			out = append(out, c)
		}
	}
	s.meta.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.ContractRecord) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Put implements store.KV.
func (s *Store) Put(ctx context.Context, bucket, key string, val []byte) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	_, err := s.metaWrite(encodeKVPut(bucket, key, val))
	return err
}

// Get implements store.KV; a missing key is store.ErrNotFound.
func (s *Store) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	v, ok := s.meta.kv[bucket][key]
	s.meta.mu.RUnlock()
	if !ok {
		return nil, store.ErrNotFound
	}
	return cloneBytes(v), nil
}

// Delete implements store.KV; deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, bucket, key string) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	s.meta.mu.RLock()
	_, ok := s.meta.kv[bucket][key]
	s.meta.mu.RUnlock()
	if !ok {
		return nil
	}
	e := newEnc(kindKVDelete, len(bucket)+len(key)+8)
	e.str(bucket)
	e.str(key)
	_, err := s.metaWrite(e.finish())
	return err
}

// List implements store.KV: a copy of the bucket, empty when unknown.
func (s *Store) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.meta.mu.RLock()
	defer s.meta.mu.RUnlock()
	out := make(map[string][]byte, len(s.meta.kv[bucket]))
	for k, v := range s.meta.kv[bucket] {
		out[k] = cloneBytes(v)
	}
	return out, nil
}

func cloneBytes(p []byte) []byte {
	if p == nil {
		return nil
	}
	return append([]byte{}, p...)
}
