package pigeon

import (
	"sync"
	"time"
)

// rateLimiter keeps one token bucket per (subject, principal), and one per
// (subject, replier, requester) for replies. Buckets of a replaced policy
// start full; idle buckets are swept. In a cluster whose size it knows
// (nodes), each bucket holds this node's share of its limit.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[rateKey]*bucket
	nodes   func() int // live nodes sharing each limit; nil: this node alone
}

type rateKey struct {
	kind               limitKind
	subject, principal string // subject: for limitSubject and limitReply only
	requester          string // for limitReply only
}

// limitKind tells apart the limits the engine keeps per principal.
type limitKind uint8

const (
	limitSubject    limitKind = iota // a subject's rateLimit
	limitNegotiate                   // Options.NegotiateRate
	limitFilter                      // Options.FilterRate
	limitQuarantine                  // Options.QuarantineRate
	limitReply                       // a subject's rateLimit, for replies to one requester
)

type bucket struct {
	tokens float64
	last   time.Time
	policy RateLimitPolicy // the limit the bucket was made for
	rate   float64         // this node's share of it
	burst  float64
}

func newRateLimiter() *rateLimiter { return &rateLimiter{buckets: map[rateKey]*bucket{}} }

// allow takes one token for (s, principal) at now.
func (l *rateLimiter) allow(s *subject, principal string, now time.Time) bool {
	return l.take(rateKey{kind: limitSubject, subject: s.name, principal: principal}, *s.rate, now)
}

// allowReply takes one token for a reply on s by replier to a request of
// requester, at now. A requester's requests are held to s's limit, so
// replies to them, one each, fit within the same limit toward that
// requester; a responder serving many requesters is not held to one
// publisher's limit in all.
func (l *rateLimiter) allowReply(s *subject, replier, requester string, now time.Time) bool {
	return l.take(rateKey{kind: limitReply, subject: s.name, principal: replier, requester: requester}, *s.rate, now)
}

// take takes one token from k's bucket, refilled at rp, at now.
func (l *rateLimiter) take(k rateKey, rp RateLimitPolicy, now time.Time) bool {
	rate, burst := share(rp, l.liveNodes())
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[k]
	switch {
	case b == nil || b.policy != rp:
		b = &bucket{tokens: burst, last: now, policy: rp, rate: rate, burst: burst}
		l.buckets[k] = b
	case b.rate != rate || b.burst != burst:
		// The cluster grew or shrank: the share changes, and what the
		// bucket holds stays within the new one.
		b.rate, b.burst = rate, burst
		b.tokens = min(b.tokens, burst)
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens += el * b.rate
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

func (l *rateLimiter) liveNodes() int {
	if l.nodes == nil {
		return 1
	}
	return max(1, l.nodes())
}

// share is one of n nodes' part of rp: its rate and burst divided by n,
// the burst at least one token.
func share(rp RateLimitPolicy, n int) (rate, burst float64) {
	rate, burst = rp.PerSecond, float64(rp.Burst)
	if n > 1 {
		rate /= float64(n)
		burst = max(1, burst/float64(n))
	}
	return rate, burst
}

// sweep drops buckets that have refilled completely.
func (l *rateLimiter) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*b.rate >= b.burst {
			delete(l.buckets, k)
		}
	}
}
