package pigeon

import (
	"context"
	"sync/atomic"
)

// A subject's retention.maxMessages is enforced as messages arrive, not
// only by the retention pass of each sweep: once an accepted message's
// sequence passes the subject's newest maxMessages by its slack, a
// background trim of the subject is asked for (countBound.note), and runs
// the same trim as the pass (trimSubject). Without it a subject held
// what a whole sweep interval (a minute by default) of publishing added
// beyond its bound, which at tens of thousands of messages a second is
// millions of messages, in memory for the memory store. The slack,
// maxMessages/8 and at least 32, makes one trim (a store cut, an audit
// record) stand for many messages rather than one.
type countBound struct {
	max, slack uint64
	// cutAt is the sequence past which an accepted message asks for a
	// trim: the subject's newest maxMessages as last trimmed, plus the
	// slack.
	cutAt atomic.Uint64
	// asked is set from the ask to the end of the trim it asked for, so
	// that one trim is queued at a time.
	asked atomic.Bool
}

// trimQueue is how many subjects' trims can wait at once; a subject
// whose ask finds it full asks again with its next message.
const trimQueue = 64

// newCountBound is the bound of a subject keeping keep messages (nil for
// none).
func newCountBound(keep int64) *countBound {
	if keep <= 0 {
		return nil
	}
	b := &countBound{max: uint64(keep), slack: max(uint64(keep)/8, 32)}
	b.cutAt.Store(b.max + b.slack)
	return b
}

// note reports whether seq, just accepted, asks for a trim, at most once
// until the trim ran (trimmed).
func (b *countBound) note(seq uint64) bool {
	return seq > b.cutAt.Load() && b.asked.CompareAndSwap(false, true)
}

// trimmed records that a trim left the subject's first retained message
// at first: the next ask comes once a message passes the newest max from
// there by the slack, at once when more came while it trimmed. After a
// failed trim, or with no bounds to go by (first 0), the next ask waits
// for the slack past last, the newest the store holds.
func (b *countBound) trimmed(first, last uint64, ok bool) {
	at := last
	if ok && first > 0 {
		at = first - 1 + b.max
	}
	b.cutAt.Store(at + b.slack)
	b.asked.Store(false)
}

// askTrim queues a trim of s, whose message seq was just accepted, when
// it passed its count bound.
func (e *Engine) askTrim(s *subject, seq uint64) {
	b := s.count
	if b == nil || !e.seqTrims || !b.note(seq) {
		return
	}
	select {
	case e.trimAsks <- s.name:
	default:
		b.asked.Store(false)
	}
}

// countTrimmer runs the trims askTrim queues, until Shutdown.
func (e *Engine) countTrimmer() {
	for {
		select {
		case <-e.done:
			return
		case name := <-e.trimAsks:
			s := e.subject(name) // as the catalog stands now
			if s == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(e.ctx, sweepTimeout)
			if err := e.trimSubject(ctx, name, s, e.now()); err != nil {
				e.opts.Logger.Error("retention: trim messages beyond retention.maxMessages", "subject", name, "err", err)
			}
			cancel()
		}
	}
}
