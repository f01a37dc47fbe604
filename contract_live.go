package pigeon

import (
	"cmp"
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	"pigeon/store"
)

// countStoredContracts counts the live contracts the store keeps, when it
// can list them (store.ContractLister), so that New counts each principal's
// live contracts from before a restart against
// Options.MaxContractsPerPrincipal; with any other store such a contract
// counts once it is used again.
func (e *Engine) countStoredContracts(ctx context.Context) error {
	l, ok := e.store.(store.ContractLister)
	if !ok {
		return nil
	}
	now := e.now()
	recs, err := l.ListContracts(ctx, now)
	if err != nil {
		return storeError(err)
	}
	for _, r := range recs {
		if !r.Revoked {
			e.live.add(r.Principal, r.ID, r.ExpiresAt, now)
		}
	}
	return nil
}

// liveContracts counts each principal's live (unexpired, unrevoked)
// contracts for Options.MaxContractsPerPrincipal. Every operation costs
// amortized O(log n) in the principal's own contracts, never a scan of all
// contracts. It also holds the contracts whose state this node cannot
// tell, another node having changed them (doubt; see contract_doubt.go).
type liveContracts struct {
	mu    sync.Mutex
	by    map[string]*principalLive
	doubt contractDoubts
}

// principalLive is one principal's live contracts: their expiries by id,
// and a min-heap of expiries that may still hold revoked ids (dropped as
// they expire, or when the heap grows to twice the live set).
type principalLive struct {
	live map[string]time.Time
	exp  expiryHeap
}

type expiryEntry struct {
	at time.Time
	id string
}

type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// prune drops the contracts that have expired by now.
func (p *principalLive) prune(now time.Time) {
	for len(p.exp) > 0 && !now.Before(p.exp[0].at) {
		x := heap.Pop(&p.exp).(expiryEntry)
		if at, ok := p.live[x.id]; ok && !at.After(x.at) { // not renewed past x
			delete(p.live, x.id)
		}
	}
}

// extend moves the expiry of a live contract id later, to at (renewal);
// the entry of the old expiry stays in the heap, and prune passes over it.
func (p *principalLive) extend(id string, at time.Time) {
	if old, ok := p.live[id]; !ok || !at.After(old) {
		return
	}
	p.live[id] = at
	heap.Push(&p.exp, expiryEntry{at: at, id: id})
	p.compact()
}

// compact rebuilds the heap from the live set once it holds more than
// twice as many entries (revoked ids, expiries renewed past).
func (p *principalLive) compact() {
	if len(p.exp) > 2*len(p.live)+32 {
		p.exp = p.exp[:0]
		for id, at := range p.live {
			p.exp = append(p.exp, expiryEntry{at: at, id: id})
		}
		heap.Init(&p.exp)
	}
}

func (p *principalLive) put(id string, at time.Time) {
	if _, ok := p.live[id]; ok {
		return
	}
	p.live[id] = at
	heap.Push(&p.exp, expiryEntry{at: at, id: id})
}

// entry returns principal's counts, made when missing. l.mu is held.
func (l *liveContracts) entry(principal string) *principalLive {
	p := l.by[principal]
	if p == nil {
		p = &principalLive{live: map[string]time.Time{}}
		l.by[principal] = p
	}
	return p
}

// forget drops principal's counts when they are empty. l.mu is held.
func (l *liveContracts) forget(principal string, p *principalLive) {
	if len(p.live) == 0 {
		delete(l.by, principal)
	}
}

// reserve counts contract id of principal, expiring at, unless principal
// already holds max live contracts at now (max < 0: no cap).
func (l *liveContracts) reserve(principal, id string, at, now time.Time, max int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.entry(principal)
	p.prune(now)
	if max >= 0 && len(p.live) >= max {
		l.forget(principal, p)
		return false
	}
	p.put(id, at)
	return true
}

// add counts a contract restored from the store, if it is live at now.
func (l *liveContracts) add(principal, id string, at, now time.Time) {
	if !now.Before(at) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entry(principal).put(id, at)
}

// extend moves the expiry of principal's live contract id later, to at.
func (l *liveContracts) extend(principal, id string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.by[principal]; p != nil {
		p.extend(id, at)
	}
}

// release stops counting a revoked contract.
func (l *liveContracts) release(principal, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.by[principal]
	if p == nil {
		return
	}
	delete(p.live, id)
	p.compact()
	l.forget(principal, p)
}

// sweep drops expired contracts and principals with none left.
func (l *liveContracts) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for principal, p := range l.by {
		p.prune(now)
		l.forget(principal, p)
	}
}

// liveEntry is one live contract as liveContracts knows it.
type liveEntry struct {
	principal, id string
	expires       time.Time
}

// snapshot lists the contracts live at now (unexpired, unrevoked).
func (l *liveContracts) snapshot(now time.Time) []liveEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []liveEntry
	for principal, p := range l.by {
		for id, exp := range p.live {
			if exp.After(now) {
				out = append(out, liveEntry{principal: principal, id: id, expires: exp})
			}
		}
	}
	return out
}

// LiveContract is one negotiated contract in force, as an operator's
// console lists it: who holds it, how they signed in, what it covers and
// until when. It carries no credential.
type LiveContract struct {
	ID        string     `json:"id"`
	Principal string     `json:"principal"`
	Auth      AuthMethod `json:"auth,omitempty"`
	Subjects  []string   `json:"subjects"`
	IssuedAt  time.Time  `json:"issuedAt,omitzero"`
	ExpiresAt time.Time  `json:"expiresAt"`
}

// DefaultLiveContracts is how many contracts LiveContracts lists when
// asked for max <= 0.
const DefaultLiveContracts = 200

// LiveContracts lists the negotiated contracts in force (not expired, not
// revoked): the max most recently issued (max <= 0: DefaultLiveContracts),
// newest first, and how many are in force in all. A contract kept by the
// store from before a restart and not used since is listed after those
// this process has seen (its issue time unknown until it is read), by
// expiry. It costs a pass over the live contracts and a store read for
// each such restored contract listed, so it suits a console refresh, not
// a hot path.
func (e *Engine) LiveContracts(ctx context.Context, max int) ([]LiveContract, int, error) {
	if max <= 0 {
		max = DefaultLiveContracts
	}
	type item struct {
		LiveContract
		c *contract // nil: not in memory (restored from the store)
	}
	live := e.live.snapshot(e.now())
	items := make([]item, len(live))
	e.contracts.mu.RLock()
	for i, l := range live {
		items[i] = item{LiveContract: LiveContract{ID: l.id, Principal: l.principal, ExpiresAt: l.expires}, c: e.contracts.m[l.id]}
		if items[i].c != nil {
			items[i].IssuedAt = items[i].c.info.IssuedAt
		}
	}
	e.contracts.mu.RUnlock()
	slices.SortFunc(items, func(x, y item) int {
		return cmp.Or(y.IssuedAt.Compare(x.IssuedAt), y.ExpiresAt.Compare(x.ExpiresAt), cmp.Compare(x.ID, y.ID))
	})
	list := make([]LiveContract, 0, min(max, len(items)))
	for _, it := range items[:min(max, len(items))] {
		c := it.c
		if c == nil {
			var err error
			if c, err = e.lookupContract(ctx, it.ID); err != nil {
				return nil, len(live), err
			}
			if c == nil { // swept meanwhile
				continue
			}
		}
		lc := it.LiveContract
		lc.IssuedAt, lc.Auth = c.info.IssuedAt, c.info.Auth
		lc.Subjects = make([]string, len(c.info.Subjects))
		for j, s := range c.info.Subjects {
			lc.Subjects[j] = s.Name
		}
		list = append(list, lc)
	}
	return list, len(live), nil
}
