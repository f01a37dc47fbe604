package wal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"pigeon/store"
)

// Quarantine: records (with their redacted bodies) live in their own log;
// memory holds only id -> (log index, time) and the ids ordered by time.
// A replacement (release) is appended and the index moves to it.
// TrimQuarantineBefore appends a tombstone (replayed like any record) and
// then truncates the log front up to the oldest record still live.

type qent struct {
	idx uint64
	t   int64 // unix nanoseconds
}

type qkey struct {
	t  int64
	id string
}

func cmpQKey(a, b qkey) int {
	if a.t != b.t {
		if a.t < b.t {
			return -1
		}
		return 1
	}
	return strings.Compare(a.id, b.id)
}

type quarantine struct {
	w      *logw
	mu     sync.RWMutex
	byID   map[string]qent
	order  []qkey // ascending
	trimMu sync.Mutex
}

func (q *quarantine) put(id string, idx uint64, t int64) {
	if old, ok := q.byID[id]; ok {
		if old.t == t {
			q.byID[id] = qent{idx: idx, t: t}
			return
		}
		if i, found := slices.BinarySearchFunc(q.order, qkey{old.t, id}, cmpQKey); found {
			q.order = slices.Delete(q.order, i, i+1)
		}
	}
	q.byID[id] = qent{idx: idx, t: t}
	k := qkey{t, id}
	if n := len(q.order); n == 0 || cmpQKey(q.order[n-1], k) < 0 {
		q.order = append(q.order, k)
		return
	}
	i, _ := slices.BinarySearchFunc(q.order, k, cmpQKey)
	q.order = slices.Insert(q.order, i, k)
}

// trim removes records with a time before t and returns how many.
func (q *quarantine) trim(t int64) int {
	i, _ := slices.BinarySearchFunc(q.order, qkey{t: t}, cmpQKey)
	for _, k := range q.order[:i] {
		delete(q.byID, k.id)
	}
	q.order = slices.Delete(q.order, 0, i)
	return i
}

// apply applies one checked record at idx; q.mu held or loading.
func (q *quarantine) apply(idx uint64, rec []byte) (int, error) {
	d := newDec(rec)
	switch rec[4] {
	case kindQuarantine:
		id := d.str()
		t := d.time()
		if d.err != nil {
			return 0, d.err
		}
		q.put(id, idx, unixNano(t))
		return 0, nil
	case kindQuarantineT:
		t := d.time()
		if err := d.done(); err != nil {
			return 0, err
		}
		return q.trim(unixNano(t)), nil
	}
	return 0, fmt.Errorf("unexpected record kind %d in quarantine", rec[4])
}

func (s *Store) loadQuarantine() error {
	q := &s.quar
	q.byID = make(map[string]qent)
	w, _, err := s.openLog(filepath.Join(s.dir, "quarantine"), "quarantine", func(index uint64, _ string, _ int64, rec []byte) error {
		_, err := q.apply(index, rec)
		return err
	})
	if err != nil {
		return err
	}
	q.w = w
	w.onCommit = func(r *wreq) {
		q.mu.Lock()
		for i, d := range r.data {
			n, _ := q.apply(r.first+uint64(i), d)
			r.res += n
		}
		q.mu.Unlock()
	}
	return nil
}

// PutQuarantine implements store.QuarantineLog.
func (s *Store) PutQuarantine(ctx context.Context, r store.QuarantineRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if r.ID == "" {
		return errors.New("wal: put quarantine: empty id")
	}
	return s.quar.w.submit(&wreq{data: [][]byte{encodeQuarantine(&r)}})
}

func (s *Store) readQuarantine(idx uint64) (store.QuarantineRecord, error) {
	p, err := s.quar.w.read(idx)
	if err != nil {
		return store.QuarantineRecord{}, err
	}
	r, err := decodeQuarantine(p)
	if err != nil {
		return store.QuarantineRecord{}, &store.CorruptError{File: s.quar.w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d: %v", idx, err)}
	}
	return r, nil
}

// GetQuarantine implements store.QuarantineLog.
func (s *Store) GetQuarantine(ctx context.Context, id string) (store.QuarantineRecord, error) {
	if err := s.enter(ctx); err != nil {
		return store.QuarantineRecord{}, err
	}
	defer s.leave()
	for range 10 {
		s.quar.mu.RLock()
		e, ok := s.quar.byID[id]
		s.quar.mu.RUnlock()
		if !ok {
			return store.QuarantineRecord{}, store.ErrNotFound
		}
		r, err := s.readQuarantine(e.idx)
		if errors.Is(err, store.ErrNotFound) {
			continue // trimmed or replaced meanwhile: look again
		}
		return r, err
	}
	return store.QuarantineRecord{}, store.ErrNotFound
}

// ListQuarantine implements store.QuarantineLog.
func (s *Store) ListQuarantine(ctx context.Context, since time.Time, max int) ([]store.QuarantineRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	if max <= 0 {
		max = math.MaxInt
	}
	q := &s.quar
	q.mu.RLock()
	i, _ := slices.BinarySearchFunc(q.order, qkey{t: unixNano(since)}, cmpQKey)
	var idxs []uint64
	for _, k := range q.order[i:] {
		if len(idxs) == max {
			break
		}
		idxs = append(idxs, q.byID[k.id].idx)
	}
	q.mu.RUnlock()
	out := make([]store.QuarantineRecord, 0, len(idxs))
	for _, idx := range idxs {
		r, err := s.readQuarantine(idx)
		if errors.Is(err, store.ErrNotFound) {
			continue // trimmed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// TrimQuarantineBefore implements store.QuarantineTrimmer: it removes
// quarantine records whose Time is before t and returns how many. The removal is durable (a tombstone record) before
// the log front is truncated.
func (s *Store) TrimQuarantineBefore(ctx context.Context, t time.Time) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	q := &s.quar
	q.trimMu.Lock()
	defer q.trimMu.Unlock()
	q.mu.RLock()
	i, _ := slices.BinarySearchFunc(q.order, qkey{t: unixNano(t)}, cmpQKey)
	q.mu.RUnlock()
	if i == 0 {
		return 0, nil
	}
	e := newEnc(kindQuarantineT, 16)
	e.time(t)
	r := &wreq{data: [][]byte{e.finish()}}
	if err := q.w.submit(r); err != nil {
		return 0, err
	}
	cut := r.first // keep the tombstone: it must outlive older copies
	q.mu.RLock()
	for _, e := range q.byID {
		cut = min(cut, e.idx)
	}
	q.mu.RUnlock()
	if err := q.w.truncateFront(cut); err != nil {
		return r.res, err
	}
	return r.res, nil
}
