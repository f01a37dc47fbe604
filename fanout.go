package pigeon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// fanout delivers one subject's new messages to its live pubsub
// subscribers: it takes each message as its publish decoded and judged it
// (the engine's recent cache; the store only when the cache missed it),
// finds the matching subscribers through the selector index and queues a
// reference to the one decoded message to each. A subscriber whose queue
// is full falls behind and catches up on its own, from the recent cache
// while it still holds what the subscriber missed and from the store
// beyond, so a slow subscriber never blocks the publisher, the fan-out or
// another subscriber; once it has caught up, the fan-out takes it back
// (join).
type fanout struct {
	e       *Engine
	subject string
	wake    chan struct{}
	high    atomic.Uint64 // the highest sequence appended, as notified
	// ring is the subject's recent cache once looked up (recent): a
	// subject's ring is never replaced, and reading it here spares every
	// message a lock that the publisher, the fan-out and the subscribers
	// would share.
	ring    atomic.Pointer[recentRing]
	nGroups atomic.Int32 // len(groups)

	mu     sync.Mutex
	live   *selectorIndex[*subscription]
	groups map[*subscription]struct{}
	// joining are lagging subscribers waiting for the fan-out to reach
	// the sequence each stands at (join).
	joining map[*subscription]uint64
	subs    int
	cursor  uint64 // next sequence the fan-out reads
	inited  bool
	hits    []*subscription

	// working is the sequence the fan-out is reading or routing, which it
	// passes over when that panics (step); only run touches it.
	working uint64
}

func newFanout(e *Engine, subject string) *fanout {
	return &fanout{e: e, subject: subject, wake: make(chan struct{}, 1), live: newSelectorIndex[*subscription](), groups: map[*subscription]struct{}{}, joining: map[*subscription]uint64{}}
}

// recent is the subject's recent cache (Engine.recent), looked up once.
func (f *fanout) recent() *recentRing {
	if r := f.ring.Load(); r != nil {
		return r
	}
	r := f.e.recent.ring(f.subject)
	f.ring.Store(r)
	return r
}

func (e *Engine) fanoutOf(subject string) *fanout {
	e.subs.mu.RLock()
	defer e.subs.mu.RUnlock()
	return e.subs.fanouts[subject]
}

// appended notes that seq was appended and wakes the fan-out, and the
// subject's work-queue subscribers at once: they lease from the store
// themselves, and a request waits for them.
func (f *fanout) appended(seq uint64) {
	for {
		h := f.high.Load()
		if seq <= h || f.high.CompareAndSwap(h, seq) {
			break
		}
	}
	if f.nGroups.Load() > 0 {
		f.pokeGroups()
	}
	f.poke()
}

func (f *fanout) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// add registers a subscriber; e.subs.mu is held.
func (f *fanout) add(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs++
	if s.subj.mode != ModePubSub {
		f.groups[s] = struct{}{}
		f.nGroups.Store(int32(len(f.groups)))
	}
}

// remove unregisters a subscriber; e.subs.mu is held.
func (f *fanout) remove(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs--
	delete(f.groups, s)
	delete(f.joining, s)
	f.nGroups.Store(int32(len(f.groups)))
	f.live.Remove(s.sel, s)
}

// joinResult is what join did with a lagging subscriber.
type joinResult int

const (
	joined  joinResult = iota // live from its cursor on
	behind                    // the fan-out is past its cursor: it reads on
	waiting                   // it stands past the fan-out, which admits it on reaching it
)

// join makes a caught-up subscriber live when it stands exactly where the
// fan-out stands. When it stands further on (the fan-out has not yet
// routed what the subscriber read from the store), it waits among the
// joiners until the fan-out reaches it (admit), and must call unjoin when
// it wakes. The subscriber's cursor does not move meanwhile.
func (f *fanout) join(s *subscription) joinResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.inited && s.cursor == f.cursor:
		s.lagging.Store(false)
		f.live.Add(s.sel, s)
		return joined
	case f.inited && s.cursor < f.cursor:
		return behind
	}
	f.joining[s] = s.cursor
	f.poke()
	return waiting
}

// await makes a subscriber the fan-out stands past a joiner, so that the
// fan-out's next move wakes it (admit); it must call unjoin when it wakes.
func (f *fanout) await(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.joining[s] = s.cursor
}

// unjoin takes a waiting subscriber off the joiners, if the fan-out has
// not admitted it meanwhile (then it is live: lagging is false).
func (f *fanout) unjoin(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.joining, s)
}

// admit makes the joiners that stand where the fan-out now stands live,
// and wakes those it has passed to read on; f.mu is held.
func (f *fanout) admit() {
	for s, at := range f.joining {
		switch {
		case at == f.cursor:
			s.lagging.Store(false)
			f.live.Add(s.sel, s)
		case at > f.cursor:
			continue
		}
		delete(f.joining, s)
		s.poke()
	}
}

func (f *fanout) pokeGroups() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.groups {
		s.poke()
	}
}

// run is the fan-out loop; it ends with the engine. It runs the store's
// reads, the decoder and the selector index on what publishers chose: a
// panic of any of them is the fan-out's to survive (step, bounds), for
// every subscriber of the subject and every message after.
func (f *fanout) run() {
	e := f.e
	ctx := e.ctx // ends with Shutdown
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// It starts at the subject's end; until the store tells it where
	// that is, it asks again at each tick (subscribers wait to join).
	last, ok := f.bounds(ctx)
	for !ok {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		last, ok = f.bounds(ctx)
	}
	f.mu.Lock()
	f.cursor, f.inited = last+1, true
	f.admit()
	f.mu.Unlock()
	for {
		f.pokeGroups()
		for f.step() {
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return
		case <-tick.C:
			// Appends that were not notified (none are expected) are
			// found at the next tick.
			if last, ok := f.bounds(ctx); ok {
				f.appended(last)
			}
		}
	}
}

// bounds reads the last sequence of the subject; ok is false when the
// store failed, or panicked (logged).
func (f *fanout) bounds(ctx context.Context) (last uint64, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			f.logPanic("reading the subject's bounds", 0, p)
			last, ok = 0, false
		}
	}()
	_, last, err := f.e.store.Bounds(ctx, f.subject)
	return last, err == nil
}

// step is forward, surviving its panic: a store's read, the decoder or the
// selector index failing on one message must not end the process, nor the
// fan-out of every message after it. The panic is logged with its stack,
// card numbers redacted. The fan-out cannot tell then to whom it had
// routed the message, nor whether it can route it at all: every live
// subscriber is sent to read on by itself from where it stands (scatter),
// as one whose queue is full is, and the fan-out passes over the message
// (skip). A stored message is not lost so: each subscriber reads it (from
// the recent cache, else from the store) on its own delivery loop, which
// survives a panic of its own by ending that subscription alone, and
// joins the fan-out again once caught up.
func (f *fanout) step() (more bool) {
	defer func() {
		if p := recover(); p != nil {
			f.logPanic("routing", f.working, p)
			f.scatter()
			f.skip(f.working)
			more = true // past the message, it may route what follows
		}
	}()
	return f.forward()
}

// logPanic logs a panic of the fan-out where it was, at seq (0: at no
// message), with its stack, card numbers redacted, and notes it
// (NoteFanoutPanic by subject, and NotePanic with PanicFanout).
func (f *fanout) logPanic(where string, seq uint64, p any) {
	f.e.panicked(PanicFanout, "the fan-out panicked "+where+"; it goes on", panicText(p), "subject", noPAN(f.subject), "seq", seq)
	f.e.note(NoteFanoutPanic, f.subject)
}

// scatter makes every live subscriber of the subject read on by itself
// from where it stands (lagging), as route does with one whose queue is
// full, and wakes it: it joins the fan-out again once caught up.
func (f *fanout) scatter() {
	e := f.e
	e.subs.mu.RLock()
	defer e.subs.mu.RUnlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.hits) // a route that panicked left them
	for s := range e.subs.all {
		if s.subj.name == f.subject && f.live.Remove(s.sel, s) {
			s.lagging.Store(true)
			s.poke()
		}
	}
}

// forward routes the messages between the cursor and the highest
// appended sequence; it reports whether it made progress and may make
// more.
func (f *fanout) forward() bool {
	e := f.e
	high := f.high.Load()
	f.mu.Lock()
	cursor := f.cursor
	f.mu.Unlock()
	if cursor > high {
		return false
	}
	ring := f.recent()
	for n := 0; cursor <= high && n < maxBatch; n++ {
		d := ring.at(cursor)
		if d == nil {
			break
		}
		f.working = cursor
		f.route(d)
		cursor++
	}
	if cursor > high {
		return false
	}
	if ring.at(cursor) != nil {
		return true
	}
	// Not in the cache: read it (and what follows) from the store.
	f.working = cursor
	sms, err := e.store.Read(e.ctx, f.subject, cursor, maxBatch)
	if err != nil || len(sms) == 0 {
		return false
	}
	for _, sm := range sms {
		f.working = sm.Seq
		if d, err := e.decode(sm); err == nil {
			f.route(d)
		} else {
			f.skip(sm.Seq)
		}
	}
	return true
}

// route queues d to every live subscriber it matches and moves the cursor
// past it.
func (f *fanout) route(d *decoded) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d.seq < f.cursor {
		return
	}
	var data any
	if f.live.needsData() {
		data = d.value()
	}
	f.hits = f.live.AppendMatches(f.hits[:0], data)
	for _, s := range f.hits {
		// The queue is bounded in messages (its capacity) and in size:
		// past liveQueueBytes, unless it is empty, it counts as full.
		if s.queuedBytes.Add(d.size) <= liveQueueBytes || len(s.queue) == 0 {
			select {
			case s.queue <- d:
				continue
			default:
			}
		}
		// Full: the subscriber falls behind and catches up on its own.
		s.queuedBytes.Add(-d.size)
		f.live.Remove(s.sel, s)
		s.lagging.Store(true)
	}
	clear(f.hits)
	f.cursor = d.seq + 1
	if len(f.joining) > 0 {
		f.admit()
	}
}

// skip moves the cursor past a stored message that does not decode.
func (f *fanout) skip(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq >= f.cursor {
		f.cursor = seq + 1
		f.admit()
	}
}
