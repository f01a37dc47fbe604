package pigeon

import (
	"context"
	"sync/atomic"

	"pigeon/store"
)

// A subject's retention.maxMessages and retention.maxBytes are enforced as
// messages arrive, not only by the retention pass of each sweep: once an
// accepted message takes the subject past a bound by its slack, a
// background trim of the subject is asked for (askTrim), and runs the same
// trim as the pass (trimSubject). Without it a subject held what a whole
// sweep interval (a minute by default) of publishing added beyond its
// bound, which at tens of thousands of messages a second is millions of
// messages, in memory for the memory store. The slack makes one trim (a
// store cut, an audit record) stand for many messages rather than one.
type trimBounds struct {
	count *countBound // retention.maxMessages; nil without
	bytes *byteBound  // retention.maxBytes; nil without
	// asked is set from an ask to the end of the trim it asked for, so
	// that one trim of the subject is queued at a time, whichever bound
	// asked.
	asked atomic.Bool
}

// newTrimBounds is the bounds of a subject keeping at most maxMessages
// messages and maxBytes bytes of them (nil for neither; 0 is no bound).
func newTrimBounds(maxMessages, maxBytes int64) *trimBounds {
	b := &trimBounds{count: newCountBound(maxMessages), bytes: newByteBound(maxBytes)}
	if b.count == nil && b.bytes == nil {
		return nil
	}
	return b
}

// A countBound asks once an accepted message's sequence passes the
// subject's newest maxMessages by the slack, maxMessages/8 and at least
// 32.
type countBound struct {
	max, slack uint64
	// cutAt is the sequence past which an accepted message asks for a
	// trim: the subject's newest maxMessages as last trimmed, plus the
	// slack.
	cutAt atomic.Uint64
}

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

// note reports whether seq, just accepted, passed the bound.
func (b *countBound) note(seq uint64) bool { return seq > b.cutAt.Load() }

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
}

// A byteBound asks once the subject's estimated bytes (store.ByteTrimmer's
// measure: the stored envelopes' lengths) pass maxBytes by the slack,
// maxBytes/8 and at least byteSlack. The estimate is the store's count
// (after the last trim, or read in the background once the policy is
// loaded: countBytes) plus the envelopes accepted since. Until the first
// count it holds only what was accepted since the load; the retention
// pass trims whatever it misses.
type byteBound struct {
	max, slack uint64
	held       atomic.Uint64 // the estimate
}

// byteSlack is the least slack of a byte bound.
const byteSlack = 64 << 10

// newByteBound is the bound of a subject keeping keep bytes (nil for
// none).
func newByteBound(keep int64) *byteBound {
	if keep <= 0 {
		return nil
	}
	return &byteBound{max: uint64(keep), slack: max(uint64(keep)/8, byteSlack)}
}

// countBytes starts the estimates of the byte bounds of subjects from the
// store's counts, in the background: a store may have to read a whole
// subject to count it (the JetStream store, once per process), and a
// policy's load must not wait for that. A subject already past its bound
// by the slack asks for a trim.
func (e *Engine) countBytes(subjects []*subject) {
	bt, ok := e.store.(store.ByteTrimmer)
	var bounded []*subject
	for _, s := range subjects {
		if s.bounds != nil && s.bounds.bytes != nil {
			bounded = append(bounded, s)
		}
	}
	if !ok || len(bounded) == 0 {
		return
	}
	e.goTracked(func() {
		for _, s := range bounded {
			held, err := bt.Bytes(e.ctx, s.name)
			if err != nil {
				continue // the pass, or the next trim, counts
			}
			s.bounds.bytes.held.Store(held)
			e.askTrim(s, 0, 0)
		}
	})
}

// note adds an accepted envelope of size bytes to the estimate and
// reports whether it passed the bound.
func (b *byteBound) note(size int) bool { return b.held.Add(uint64(size)) > b.max+b.slack }

// trimmed records that a trim left the subject holding held bytes, as the
// store counts them; after a failed trim, or without a count, the next
// ask waits for the slack past the bound.
func (b *byteBound) trimmed(held uint64, ok bool) {
	if !ok {
		held = b.max
	}
	b.held.Store(held)
}

// trimQueue is how many subjects' trims can wait at once; a subject
// whose ask finds it full asks again with its next message.
const trimQueue = 64

// askTrim queues a trim of s, whose message seq, size bytes stored, was
// just accepted, when it passed a bound.
func (e *Engine) askTrim(s *subject, seq uint64, size int) {
	b := s.bounds
	if b == nil {
		return
	}
	over := b.count != nil && e.seqTrims && b.count.note(seq)
	if b.bytes != nil && e.byteTrims && b.bytes.note(size) {
		over = true
	}
	if !over || !b.asked.CompareAndSwap(false, true) {
		return
	}
	select {
	case e.trimAsks <- s.name:
	default:
		b.asked.Store(false)
	}
}

// boundTrimmer runs the trims askTrim queues, until Shutdown.
func (e *Engine) boundTrimmer() {
	for {
		select {
		case <-e.done:
			return
		case name := <-e.trimAsks:
			e.trimAsked(name)
		}
	}
}

// trimAsked runs the trim asked for subject name. A panic of it (of the
// store, which the application may supply) ends that trim alone, logged:
// the subject asks again with its next message past a bound, and the
// trimmer goes on with the other subjects' asks.
func (e *Engine) trimAsked(name string) {
	s := e.subject(name) // as the catalog stands now
	if s == nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			e.logPanic("the trim of subject "+noPAN(name)+" beyond retention.maxMessages or maxBytes", p)
			if s.bounds != nil {
				s.bounds.asked.Store(false)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(e.ctx, sweepTimeout)
	defer cancel()
	if err := e.trimSubject(ctx, name, s, e.now()); err != nil {
		e.opts.Logger.Error("retention: trim messages beyond retention.maxMessages or maxBytes", "subject", name, "err", err)
	}
}
