package pigeon

import (
	"context"
	"sync"

	"pigeon/internal/cond"
	"pigeon/store"
)

// maxCachedFilters bounds each generation of the filter cache.
const maxCachedFilters = 1024

// filterCache keeps compiled subscription filters by their text, so that
// subscribing again with a filter (a client that reconnects, a program
// redeployed) does not compile it again. A compiled filter is immutable
// and safe for concurrent use, so one serves every subscription.
//
// It holds two generations of at most maxCachedFilters each: new filters
// go to the young one, and when it is full it becomes the old one (the
// old one dropped) and a new young one starts. A filter found in the old
// generation moves to the young one. So a filter used at least once in
// every maxCachedFilters new ones stays, however many others are
// compiled: a principal that compiles filters as fast as its FilterRate
// allows cannot push the ones in use out, and make their subscribers
// compile them again (within their own rate) when they reconnect.
type filterCache struct {
	mu         sync.Mutex
	young, old map[string]*cond.Condition
}

func (c *filterCache) get(src string) *cond.Condition {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.young[src]; f != nil {
		return f
	}
	f := c.old[src]
	if f != nil {
		delete(c.old, src)
		c.addLocked(src, f)
	}
	return f
}

func (c *filterCache) put(src string, f *cond.Condition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(src, f)
}

func (c *filterCache) addLocked(src string, f *cond.Condition) {
	if c.young == nil || len(c.young) >= maxCachedFilters {
		c.old, c.young = c.young, make(map[string]*cond.Condition)
	}
	c.young[src] = f
}

// subscriptionFilter returns src compiled, for a subscription of c to
// subject: from the cache, or compiled within c's principal's
// Options.FilterRate (RATE_LIMITED, audited, beyond it; FILTER_INVALID
// when it does not compile).
func (e *Engine) subscriptionFilter(ctx context.Context, c Caller, subject, src string) (*cond.Condition, error) {
	if f := e.filters.get(src); f != nil {
		return f, nil
	}
	if rp := e.opts.FilterRate; rp.PerSecond > 0 && !e.limiter.take(rateKey{kind: limitFilter, principal: c.Principal.ID}, rp, e.now()) {
		e.audit(ctx, EventSubscribeDenied.record(OutcomeDeny, CodeRateLimited, store.AuditRecord{Subject: subject, Principal: c.Principal.ID, ContractID: c.ContractID}))
		return nil, NewError(CodeRateLimited, "this principal compiles new subscription filters too fast; subscribe again later, or reuse a filter")
	}
	f, err := compileCondition(src)
	if err != nil {
		return nil, WrapError(CodeFilterInvalid, err, "filter does not compile: %v", err)
	}
	e.filters.put(src, f)
	return f, nil
}
