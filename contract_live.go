package pigeon

import (
	"container/heap"
	"context"
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
// contracts.
type liveContracts struct {
	mu sync.Mutex
	by map[string]*principalLive
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
		delete(p.live, x.id)
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

// release stops counting a revoked contract.
func (l *liveContracts) release(principal, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.by[principal]
	if p == nil {
		return
	}
	delete(p.live, id)
	if len(p.exp) > 2*len(p.live)+32 {
		p.exp = p.exp[:0]
		for id, at := range p.live {
			p.exp = append(p.exp, expiryEntry{at: at, id: id})
		}
		heap.Init(&p.exp)
	}
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
