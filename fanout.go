package pigeon

import (
	"sync"
	"time"
)

// fanout delivers one subject's new messages to its live pubsub
// subscribers: it reads each message from the store once, decodes it once,
// finds the matching subscribers through the selector index and queues the
// message to each. A subscriber whose queue is full falls behind and
// catches up from the store on its own, so a slow subscriber never blocks
// the publisher, the fan-out or another subscriber.
type fanout struct {
	e       *Engine
	subject string
	wake    chan struct{}

	mu     sync.Mutex
	live   *selectorIndex[*subscription]
	groups map[*subscription]struct{}
	subs   int
	cursor uint64 // next sequence the fan-out reads
	inited bool
	hits   []*subscription
}

func newFanout(e *Engine, subject string) *fanout {
	return &fanout{e: e, subject: subject, wake: make(chan struct{}, 1), live: newSelectorIndex[*subscription](), groups: map[*subscription]struct{}{}}
}

func (e *Engine) fanoutOf(subject string) *fanout {
	e.subs.mu.RLock()
	defer e.subs.mu.RUnlock()
	return e.subs.fanouts[subject]
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
	}
}

// remove unregisters a subscriber; e.subs.mu is held.
func (f *fanout) remove(s *subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs--
	delete(f.groups, s)
	f.live.Remove(s.sel, s)
}

// join makes a caught-up subscriber live when it stands exactly where the
// fan-out stands; it reports whether it did.
func (f *fanout) join(s *subscription) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.inited || s.cursor != f.cursor {
		f.poke()
		return false
	}
	s.lagging.Store(false)
	f.live.Add(s.sel, s)
	return true
}

func (f *fanout) pokeGroups() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range f.groups {
		s.poke()
	}
}

// run is the fan-out loop; it ends with the engine.
func (f *fanout) run() {
	e := f.e
	ctx := e.ctx // ends with Shutdown
	_, last, err := e.store.Bounds(ctx, f.subject)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.cursor, f.inited = last+1, true
	f.mu.Unlock()
	for {
		f.pokeGroups()
		for {
			sms, err := e.store.Read(ctx, f.subject, f.cursor, 256)
			if err != nil || len(sms) == 0 {
				break
			}
			for _, sm := range sms {
				d, err := e.decode(sm)
				f.mu.Lock()
				if err == nil {
					f.hits = f.live.AppendMatches(f.hits[:0], d.data)
					for _, s := range f.hits {
						select {
						case s.queue <- queued{m: d.m, data: d.data}:
						default:
							// Full: the subscriber falls behind and reads the store.
							f.live.Remove(s.sel, s)
							s.lagging.Store(true)
						}
					}
				}
				f.cursor = sm.Seq + 1
				f.mu.Unlock()
			}
			if len(sms) < 256 {
				break
			}
		}
		select {
		case <-f.wake:
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
