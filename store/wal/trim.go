package wal

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"pigeon/store"
)

// trimChunk bounds how many messages one truncation removes, so that the
// ids to forget stay few and each truncation is short.
const trimChunk = 1 << 16

// TrimBefore implements store.Trimmer: it removes the messages of subject
// accepted before t from the front of the log. Appends to the subject wait
// only while tidwall/wal rewrites the segment holding the new first
// message (at most SegmentSize bytes); the scan that finds the cut does
// not block them. A removed message whose idempotency key is live is kept
// (durably, within maxKeptBytes) and still answers a retry until the key
// expires; the other keys of removed messages stop deduplicating.
func (s *Store) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	return s.trimFront(ctx, subject, func(h msgHead) bool { return !h.time.Before(t) })
}

// TrimThrough implements store.SeqTrimmer: it removes the messages of
// subject with Seq <= seq from the front of the log, the way TrimBefore
// does.
func (s *Store) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	return s.trimFront(ctx, subject, func(h msgHead) bool { return h.seq > seq })
}

// Bytes implements store.ByteTrimmer: the sum of the body lengths of
// subject's committed messages retained, which the index keeps; nothing
// is read from disk.
func (s *Store) Bytes(ctx context.Context, subject string) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, nil
	}
	return sub.bytes.Load(), nil
}

// TrimToBytes implements store.ByteTrimmer: it removes the oldest
// messages of subject, the way TrimBefore does, until the bodies of those
// retained add up to at most max. The index's count says whether any
// must go and how many bytes; only the records that go are read.
func (s *Store) TrimToBytes(ctx context.Context, subject string, max uint64) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	sub, _ := s.subject(subject, false)
	s.leave()
	if sub == nil || sub.bytes.Load() <= max {
		return 0, nil
	}
	// What must go, as the count stands once the trim holds trimMu.
	var excess uint64
	counted := false
	return s.trimFront(ctx, subject, func(h msgHead) bool {
		if !counted {
			counted = true
			if held := sub.bytes.Load(); held > max {
				excess = held - max
			}
		}
		if excess == 0 {
			return true
		}
		excess -= min(excess, uint64(h.body))
		return false
	})
}

// trimFront removes messages of subject from the front of the log up to
// the first one whose head keep accepts, at most trimChunk per
// truncation, and forgets their ids and the idempotency claims it does
// not keep (see keep). It returns how many it removed, also when it fails
// part way. Then it compacts the kept log.
func (s *Store) trimFront(ctx context.Context, subject string, keep func(h msgHead) bool) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, nil
	}
	sub.trimMu.Lock()
	defer sub.trimMu.Unlock()
	n, err := s.trimFrontLocked(sub, keep)
	if cerr := s.compactKept(); err == nil {
		err = cerr
	}
	return n, err
}

// chainAcceptedBefore makes sure the acceptance record of every
// kindAccepted message of sub below cut, all committed, is committed to
// the audit log, flushing the outbox when one is not. A trim calls it
// before it truncates: the message's record is the only copy on disk of an
// acceptance record still in the outbox, and a crash after the truncation
// would lose it for good (recovery finds missing records in the messages
// that remain).
func (s *Store) chainAcceptedBefore(sub *subject, cut uint64) error {
	// A batch's records are put in the outbox (onWritten) before its
	// commit index is published: what the trim read as committed has its
	// record in the outbox or in the audit log.
	for range 3 {
		if sub.track.floor(cut) >= cut-1 {
			return nil
		}
		if err := s.flushAccepted(); err != nil {
			return fmt.Errorf("wal: trim %s: chain the acceptance records of the messages it removes: %w", sub.name, err)
		}
	}
	if sub.track.floor(cut) >= cut-1 {
		return nil
	}
	return fmt.Errorf("wal: trim %s: the acceptance records of the messages it removes are not in the audit log yet", sub.name)
}

// trimFrontLocked is trimFront with sub.trimMu held.
func (s *Store) trimFrontLocked(sub *subject, keep func(h msgHead) bool) (int, error) {
	w := sub.w
	total := 0
	for {
		first, last := w.bounds()
		cut := first
		var heads []msgHead
		stop := false
		var kept []store.Message // trimmed with a live claim
		s.msgs.idx.mu.Lock()
		clock := s.msgs.idx.clock
		s.msgs.idx.mu.Unlock()
		for cut <= last && len(heads) < trimChunk {
			p, err := w.read(cut)
			if err != nil {
				return total, err
			}
			h, err := decodeMessageHead(p)
			if err != nil {
				return total, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d: %v", cut, err)}
			}
			if keep(h) {
				stop = true
				break
			}
			if h.idemKey != "" && unixNano(h.idemExp) > clock {
				m, err := s.decodeMessageAt(sub, cut, p)
				if err != nil {
					return total, err
				}
				m.Body = bytes.Clone(m.Body)
				kept = append(kept, m)
			}
			heads = append(heads, h)
			cut++
		}
		if cut == first {
			return total, nil
		}
		// The copies are durable before the originals go.
		if err := s.keep(sub, kept); err != nil {
			return total, err
		}
		// So are the acceptance records of those that go: until the
		// flusher chains one, the message's own record is its only copy
		// on disk, and recovery looks for missing ones only there.
		if err := s.chainAcceptedBefore(sub, cut); err != nil {
			return total, err
		}
		if err := w.truncateFront(cut); err != nil {
			return total, err
		}
		var gone uint64
		for _, h := range heads {
			gone += uint64(h.body)
		}
		sub.bytes.Add(-gone)
		x := &s.msgs.idx
		x.mu.Lock()
		for _, h := range heads {
			loc := pack(sub.num, h.seq)
			x.removeID(h.id, loc)
			if _, ok := x.kept[loc]; h.idemKey != "" && !ok {
				x.unclaim(h.idemKey, loc) // not kept (over the budget, or expired)
			}
		}
		x.mu.Unlock()
		total += int(cut - first)
		if stop || cut > last {
			return total, nil
		}
	}
}
