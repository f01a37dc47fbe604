package jetstream

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// A subject's retained bytes (store.ByteTrimmer) are the sum of its
// messages' body lengths. JetStream's own count of a stream's bytes
// (StreamState.Bytes) also holds each message's NATS subject, headers and
// framing, so it is another measure, and no stream state gives ours.
// The store tallies it itself, per subject and in memory, as it first
// needs it: the body length of each message from the stream's first on,
// extended by reading the messages appended since it last looked (by any
// node) and cut by the stream's first sequence (trims by any node). So a
// process reads each message of a bounded subject once for the tally, a
// message's length costs 4 bytes while it is retained, and Bytes and a
// TrimToBytes within the bound read only the messages new since the last
// look.

// tally is the body lengths of one subject's retained messages.
type tally struct {
	mu    chanMutex
	first uint64   // sequence of sizes[0]
	sizes []uint32 // body length from first on; 0 for a sequence with no message
	total uint64   // sum of sizes
}

// chanMutex is a mutex whose Lock gives up when ctx ends: a trim of the
// subject may hold it while it reads and purges.
type chanMutex chan struct{}

func (m chanMutex) lock(ctx context.Context) error {
	select {
	case m <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m chanMutex) unlock() { <-m }

// tallyOf returns the tally of subject, made on first use.
func (s *Store) tallyOf(subject string) *tally {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tallies[subject]
	if t == nil {
		t = &tally{mu: make(chanMutex, 1)}
		s.tallies[subject] = t
	}
	return t
}

// update brings t, locked, to the state of the subject's stream st: it
// forgets the messages trimmed since it last looked and reads the
// lengths of those appended.
func (s *Store) update(ctx context.Context, st jetstream.Stream, t *tally) error {
	info, err := st.Info(ctx)
	if err != nil {
		return s.fail(ctx, err)
	}
	first, last := max(info.State.FirstSeq, 1), info.State.LastSeq
	if end := t.first + uint64(len(t.sizes)); end > last+1 || t.first == 0 {
		// New, or the stream is not the one tallied (it was recreated).
		t.first, t.sizes, t.total = first, nil, 0
	}
	if t.first < first {
		k := min(first-t.first, uint64(len(t.sizes)))
		for _, n := range t.sizes[:k] {
			t.total -= uint64(n)
		}
		t.sizes = t.sizes[k:]
		t.first = first
		if len(t.sizes) == 0 {
			t.sizes = nil // let the old array go
		}
	}
	filter := info.Config.Subjects[0]
	for seq := t.first + uint64(len(t.sizes)); seq <= last; {
		raw, err := direct(ctx, s.opts.Timeout, func() (*jetstream.RawStreamMsg, error) {
			return st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return s.fail(ctx, err)
		}
		for ; seq < raw.Sequence; seq++ {
			t.sizes = append(t.sizes, 0)
		}
		t.sizes = append(t.sizes, uint32(len(raw.Data)))
		t.total += uint64(len(raw.Data))
		seq = raw.Sequence + 1
	}
	return nil
}

// counted returns the tally of subject, locked and brought up to date
// (unlock releases it), or a nil tally for a subject with no stream.
func (s *Store) counted(ctx context.Context, subject string) (t *tally, unlock func(), err error) {
	if err := s.begin(ctx); err != nil {
		return nil, nil, err
	}
	st, err := s.stream(ctx, subject, false)
	if st == nil || err != nil {
		return nil, nil, err
	}
	t = s.tallyOf(subject)
	if err := t.mu.lock(ctx); err != nil {
		return nil, nil, err
	}
	if err := s.update(ctx, st, t); err != nil {
		t.mu.unlock()
		return nil, nil, err
	}
	return t, t.mu.unlock, nil
}

// Bytes implements store.ByteTrimmer: the sum of the body lengths of
// subject's retained messages, from the tally, which reads only the
// messages appended since it last looked.
func (s *Store) Bytes(ctx context.Context, subject string) (uint64, error) {
	t, unlock, err := s.counted(ctx, subject)
	if t == nil {
		return 0, err
	}
	defer unlock()
	return t.total, nil
}

// TrimToBytes implements store.ByteTrimmer: it purges the front of the
// subject's stream through the last message whose removal the bound
// needs, found from the tally, the way TrimThrough does.
func (s *Store) TrimToBytes(ctx context.Context, subject string, max uint64) (int, error) {
	t, unlock, err := s.counted(ctx, subject)
	if t == nil {
		return 0, err
	}
	defer unlock()
	held, cut := t.total, t.first
	for _, n := range t.sizes {
		if held <= max {
			break
		}
		held -= uint64(n)
		cut++
	}
	if cut == t.first {
		return 0, nil
	}
	return s.trimFront(ctx, subject, func(raw *jetstream.RawStreamMsg) bool { return raw.Sequence >= cut })
}

var _ store.ByteTrimmer = (*Store)(nil)
