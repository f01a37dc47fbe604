package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"pigeon/store"
)

// Metadata: progress, contracts and KV live in memory and in the meta log,
// one record per change, replayed on open. Every change is applied to
// memory only once its record is committed (onCommit runs the same apply
// as replay), so memory never holds what the disk does not. When the log
// has grown by CompactAfter records the compactor writes the whole state
// to meta.snapshot (atomically) and truncates the log front. The methods
// over this state live in progress.go, contracts.go and kv.go.

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

func cloneBytes(p []byte) []byte {
	if p == nil {
		return nil
	}
	return append([]byte{}, p...)
}
