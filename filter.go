package pigeon

import (
	"context"
	"sync"

	"pigeon/internal/cond"
	"pigeon/store"
)

// maxCachedFilters bounds the filter cache; when it is full it starts
// again empty.
const maxCachedFilters = 1024

// filterCache keeps compiled subscription filters by their text, so that
// subscribing again with a filter (a client that reconnects, a program
// redeployed) does not compile it again. A compiled filter is immutable
// and safe for concurrent use, so one serves every subscription.
type filterCache struct {
	mu sync.Mutex
	m  map[string]*cond.Condition
}

func (c *filterCache) get(src string) *cond.Condition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[src]
}

func (c *filterCache) put(src string, f *cond.Condition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedFilters {
		c.m = make(map[string]*cond.Condition)
	}
	c.m[src] = f
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
