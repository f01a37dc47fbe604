package pigeon

import "sync"

// subscriptions is the engine's table of running subscriptions, how many
// each principal runs, and the per-subject fan-outs.
type subscriptions struct {
	mu      sync.RWMutex // write-locked to change the tables
	all     map[*subscription]struct{}
	held    map[string]int // principal id → subscriptions in all; absent at 0
	fanouts map[string]*fanout
}

func (t *subscriptions) init() {
	t.all = map[*subscription]struct{}{}
	t.held = map[string]int{}
	t.fanouts = map[string]*fanout{}
}

// add puts s in the table unless its principal already runs limit
// subscriptions (limit < 0: no cap); t.mu must be write-locked.
func (t *subscriptions) add(s *subscription, limit int) bool {
	p := s.caller.Principal.ID
	if limit >= 0 && t.held[p] >= limit {
		return false
	}
	t.all[s] = struct{}{}
	t.held[p]++
	return true
}

// remove takes s out of the table; t.mu must be write-locked.
func (t *subscriptions) remove(s *subscription) {
	if _, ok := t.all[s]; !ok {
		return
	}
	delete(t.all, s)
	p := s.caller.Principal.ID
	if t.held[p]--; t.held[p] <= 0 {
		delete(t.held, p)
	}
}

func (t *subscriptions) closeAll() {
	t.mu.Lock()
	subs := make([]*subscription, 0, len(t.all))
	for s := range t.all {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, s := range subs {
		s.stop(errShutdown())
	}
}

// sessionSubs tracks one session's subscriptions.
type sessionSubs struct {
	mu   sync.Mutex
	subs []*subscription
}

func (ss *sessionSubs) add(s *subscription) {
	ss.mu.Lock()
	ss.subs = append(ss.subs, s)
	ss.mu.Unlock()
}

func (ss *sessionSubs) closeAll() {
	ss.mu.Lock()
	subs := ss.subs
	ss.subs = nil
	ss.mu.Unlock()
	for _, s := range subs {
		s.stop(nil)
		<-s.done
	}
}

// onContractRevoked stops the contract's subscriptions at once: their
// contexts end, so a handler or a transport still holding a delivery of
// theirs (a WebSocket write queue) sees the revocation now, not when the
// subscription's loop next looks at the contract. The leases its pull
// receives hold go back to their groups.
func (e *Engine) onContractRevoked(id string) {
	for _, s := range e.subscriptionsOf(id) {
		s.stop(NewError(CodeContractRevoked, "the contract was revoked")) // ends s.ctx, which every wait of the loop watches
	}
	// What its pull receives hold goes back, without waiting here for a
	// group busy with a store read.
	e.goTracked(func() { e.releaseRevoked(id) })
}

// subscriptionsOf returns the running subscriptions of contract id.
func (e *Engine) subscriptionsOf(id string) []*subscription {
	e.subs.mu.RLock()
	defer e.subs.mu.RUnlock()
	var hit []*subscription
	for s := range e.subs.all {
		if s.caller.ContractID == id {
			hit = append(hit, s)
		}
	}
	return hit
}
