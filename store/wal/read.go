package wal

import (
	"context"
	"errors"
	"fmt"
	"math"

	"pigeon/store"
)

func (s *Store) readMessage(sub *subject, seq uint64) (store.Message, error) {
	first, last := sub.w.bounds()
	if seq < first || seq > last {
		return store.Message{}, store.ErrNotFound
	}
	p, err := sub.w.read(seq)
	if err != nil {
		return store.Message{}, err
	}
	return s.decodeMessageAt(sub, seq, p)
}

func (s *Store) decodeMessageAt(sub *subject, seq uint64, p []byte) (store.Message, error) {
	m, err := decodeMessage(p, sub.name)
	if err != nil || m.Seq != seq {
		return store.Message{}, &store.CorruptError{File: sub.w.dir, Offset: -1,
			Reason: fmt.Sprintf("entry %d is not message %d (%v)", seq, seq, err)}
	}
	return m, nil
}

// Read implements store.MessageLog.
func (s *Store) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return nil, nil
	}
	if max <= 0 {
		max = math.MaxInt
	}
	w := sub.w
	first, last := w.bounds()
	from = maxU(from, first)
	if from > last {
		return nil, nil
	}
	out := make([]store.Message, 0, min(uint64(max), last-from+1, 1024))
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
		m, err := s.decodeMessageAt(sub, seq, p)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// Lookup implements store.MessageLog.
func (s *Store) Lookup(ctx context.Context, id string) (store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.leave()
	for _, loc := range s.msgs.idx.findID(id) {
		num, seq := unpack(loc)
		sub := s.subjectByNum(num)
		if sub == nil {
			continue
		}
		m, err := s.readMessage(sub, seq)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return store.Message{}, err
		}
		if m.ID == id {
			return m, nil
		}
	}
	return store.Message{}, store.ErrNotFound
}

// Bounds implements store.MessageLog.
func (s *Store) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, 0, nil
	}
	first, last := sub.w.bounds()
	if last == 0 {
		return 0, 0, nil
	}
	return first, last, nil
}

// ListMessageSubjects implements store.MessageSubjectLister from the
// index in memory: the subjects whose logs hold a committed message; no
// disk read.
func (s *Store) ListMessageSubjects(ctx context.Context) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	var out []string
	for name, sub := range s.msgs.byName {
		if first, last := sub.w.bounds(); last != 0 && first <= last {
			out = append(out, name)
		}
	}
	return out, nil
}

var _ store.MessageSubjectLister = (*Store)(nil)
