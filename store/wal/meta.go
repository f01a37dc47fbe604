package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pigeon/store"
)

// Metadata: progress, contracts and KV live in memory and in the meta log,
// one record per change, replayed on open. Every change is applied to
// memory only once its record is committed (onCommit runs the same apply
// as replay), so memory never holds what the disk does not. When the log
// has grown by CompactAfter records the compactor writes the whole state
// to meta.snapshot (atomically) and truncates the log front. The methods
// over this state live in progress.go, contracts.go and kv.go.
//
// Each progress record carries the time it was written (in milliseconds,
// rounded up) and each group remembers the time and the meta index of its
// last one: PruneGroups chooses by the time, and its record deletes a
// group only if no later record wrote it, on replay as when it committed.
// Records and snapshots from before the time was kept count as written
// when the store opened.

type metaLog struct {
	w *logw

	mu        sync.RWMutex                 // guards the state below
	groups    map[string]map[string]*group // subject → group name → progress
	contracts map[string]store.ContractRecord
	kv        map[string]map[string][]byte
	applied   uint64    // index of the last applied record
	opened    time.Time // when Open loaded the state: the time of writes that carry none

	since    uint64 // records since the snapshot; under w.mu
	snapSize uint64 // records in the last snapshot; under w.mu
	compact  chan struct{}
}

func (s *Store) metaDir() string      { return filepath.Join(s.dir, "meta") }
func (s *Store) snapshotPath() string { return filepath.Join(s.dir, "meta.snapshot") }

func (m *metaLog) init() {
	m.groups = make(map[string]map[string]*group)
	m.contracts = make(map[string]store.ContractRecord)
	m.kv = make(map[string]map[string][]byte)
	m.compact = make(chan struct{}, 1)
}

// apply applies rec, one checked record, at index in the meta log (0 for
// a snapshot's records); m.mu is held (or we are loading).
func (m *metaLog) apply(index uint64, rec []byte) (int, error) {
	d := newDec(rec)
	res := 0
	switch rec[4] {
	case kindDone:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		seq := d.uvarint()
		at := m.stamp(d)
		if d.err == nil {
			m.write(key, index, at).MarkDone(seq)
		}
	case kindAttempt:
		// Raises the attempt only (store.GroupState.MarkAttempt), as it
		// commits and as it is replayed: a record of attempt n applied
		// after one of a later attempt leaves the later one. The group
		// counts as written all the same, so that a replay deletes no
		// group (kindGroupsPruned) the commit kept. A log written before
		// MarkAttempt only raised may hold records that lowered a count
		// (a delivery given back): replayed, they leave the count as it
		// was, the attempt spent, never one too few.
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		seq := d.uvarint()
		n := d.varint()
		at := m.stamp(d)
		if d.err == nil {
			m.write(key, index, at).MarkAttempt(seq, int(n))
		}
	case kindLowerAttempt:
		// Made only if the attempt recorded is from when the record is
		// applied, as it commits and as it is replayed (as kindKVSwap):
		// records apply in the log's order, under m.mu, so a lowering
		// applied after another write changed the attempt is not made,
		// on a replay either. res 1: made.
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		seq := d.uvarint()
		from, to := d.varint(), d.varint()
		at := m.stamp(d)
		if d.err == nil && m.attemptIs(key, seq, from, to) == nil {
			_ = m.write(key, index, at).LowerAttempt(seq, int(from), int(to)) // attemptIs: made
			res = 1
		}
	case kindFloor:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		floor := d.uvarint()
		at := m.stamp(d)
		if d.err == nil {
			m.write(key, index, at).RaiseFloor(floor)
		}
	case kindGroupState:
		key := store.GroupKey{Subject: d.str(), Group: d.str()}
		g := store.GroupState{Floor: d.uvarint(), Attempts: map[uint64]int{}}
		prev := g.Floor
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			prev += d.uvarint()
			g.Done = append(g.Done, prev)
		}
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			seq := d.uvarint()
			g.Attempts[seq] = int(d.varint())
		}
		at := m.stamp(d)
		if d.err == nil {
			*m.write(key, index, at) = g
		}
	case kindGroupsPruned:
		subject, upTo := d.str(), d.uvarint()
		gs := m.groups[subject]
		for n := d.uvarint(); n > 0 && d.err == nil; n-- {
			name := d.str()
			if g := gs[name]; d.err == nil && g != nil && g.index <= upTo {
				delete(gs, name)
				res++
			}
		}
		if len(gs) == 0 {
			delete(m.groups, subject)
		}
	case kindContract:
		c := decodeContract(d)
		// A revocation is final: a record not revoked leaves a revoked
		// contract as it was, when it commits as when it is replayed.
		if d.err == nil {
			if cur, ok := m.contracts[c.ID]; !ok || !cur.Revoked || c.Revoked {
				m.contracts[c.ID] = c
			}
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
			m.kvPut(bucket, key, val)
		}
	case kindKVDelete:
		bucket, key := d.str(), d.str()
		if d.err == nil {
			m.kvDelete(bucket, key)
		}
	case kindKVSwap:
		// Made only if the key holds old when the record is applied, as
		// it commits and as it is replayed: records apply in the log's
		// order, under m.mu, so of two swaps from one value the first
		// applied is made and the second finds the key changed. res 1:
		// made.
		bucket, key := d.str(), d.str()
		hasOld, old := d.bool(), d.bytes()
		hasVal, val := d.bool(), d.bytes()
		if d.err == nil {
			cur, ok := m.kv[bucket][key]
			if ok == hasOld && bytes.Equal(cur, old) {
				if hasVal {
					m.kvPut(bucket, key, val)
				} else {
					m.kvDelete(bucket, key)
				}
				res = 1
			}
		}
	default:
		return 0, fmt.Errorf("unexpected record kind %d in metadata", rec[4])
	}
	return res, d.done()
}

// kvPut stores val (nil: the empty value) under bucket and key.
func (m *metaLog) kvPut(bucket, key string, val []byte) {
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

// kvDelete removes the value under bucket and key.
func (m *metaLog) kvDelete(bucket, key string) {
	delete(m.kv[bucket], key)
	if len(m.kv[bucket]) == 0 {
		delete(m.kv, bucket)
	}
}

// group is one consumer group's progress, and the time and meta index of
// the record that last wrote it.
type group struct {
	store.GroupState
	at    time.Time
	index uint64
}

// attemptIs is store.GroupState.AttemptIs of the progress of key (the
// zero state when there is none); from and to as a record holds them.
func (m *metaLog) attemptIs(key store.GroupKey, seq uint64, from, to int64) error {
	if from != int64(int(from)) || to != int64(int(to)) {
		return fmt.Errorf("wal: an attempt lowered from %d to %d does not fit an int", from, to)
	}
	var cur store.GroupState
	if g := m.get(key); g != nil {
		cur = g.GroupState
	}
	return cur.AttemptIs(seq, int(from), int(to))
}

// get returns the progress of key, or nil.
func (m *metaLog) get(key store.GroupKey) *group { return m.groups[key.Subject][key.Group] }

// write returns the progress of key, created when first seen, as written
// at time at by the record at index.
func (m *metaLog) write(key store.GroupKey, index uint64, at time.Time) *store.GroupState {
	gs := m.groups[key.Subject]
	if gs == nil {
		gs = make(map[string]*group)
		m.groups[key.Subject] = gs
	}
	g := gs[key.Group]
	if g == nil {
		g = &group{GroupState: store.GroupState{Attempts: map[uint64]int{}}}
		gs[key.Group] = g
	}
	g.at, g.index = at, index
	return &g.GroupState
}

// stamp decodes the write time that ends a progress record; a record
// written before the time was kept counts as written when the store
// opened.
func (m *metaLog) stamp(d *dec) time.Time {
	if d.err == nil && len(d.b) == 0 {
		return m.opened
	}
	return time.UnixMilli(d.varint())
}

// stampOf is t in whole milliseconds, rounded up: a group never counts as
// written earlier than it was.
func stampOf(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

func (s *Store) loadMeta() error {
	m := &s.meta
	m.init()
	m.opened = s.opts.Now()
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
			// The snapshot keeps no group's last index: all count as
			// written at the index it covers, as compactMeta made them.
			_, err := m.apply(snapN, rec)
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
		_, err := m.apply(index, rec)
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
		for i, d := range r.data {
			n, _ := m.apply(r.first+uint64(i), d) // we encoded it: it decodes
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
	records := uint64(len(m.contracts))
	for _, gs := range m.groups {
		records += uint64(len(gs))
	}
	for _, b := range m.kv {
		records += uint64(len(b))
	}
	m.mu.RUnlock()
	if err := writeFileAtomic(s.snapshotPath(), data); err != nil {
		return err
	}
	m.raiseIndexes(n)
	if err := m.w.truncateFront(n + 1); err != nil {
		return err
	}
	m.w.mu.Lock()
	m.since = m.w.committed.Load() - n
	m.snapSize = records
	m.w.mu.Unlock()
	return nil
}

// raiseIndexes counts every group last written at or before meta index n
// as written at n, once a snapshot covering n is on disk: a replay from
// it knows no better (loadMeta), and a groups-pruned record whose look
// came before n must spare the same groups now as after a reopen. Sparing
// is the safe side: a group kept is pruned by the next pass if unused,
// while a group deleted on a reopen only would lose progress the running
// store kept. (A record committed between the snapshot's encoding and
// this call may delete a group the replay keeps: the safe side again.)
func (m *metaLog) raiseIndexes(n uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, gs := range m.groups {
		for _, g := range gs {
			g.index = max(g.index, n)
		}
	}
}

func (m *metaLog) encodeSnapshot(n uint64) []byte {
	e := newEnc(kindSnapshot, 16)
	e.uvarint(n)
	out := frame(nil, e.finish())
	for subject, gs := range m.groups {
		for name, g := range gs {
			e := newEnc(kindGroupState, 72+8*len(g.Done)+12*len(g.Attempts))
			e.str(subject)
			e.str(name)
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
			e.varint(stampOf(g.at))
			out = frame(out, e.finish())
		}
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
