package pigeon

import (
	"sync"
	"time"
)

// rateLimiter keeps one token bucket per (subject, principal). Buckets of
// a replaced policy start full; idle buckets are swept.
type rateLimiter struct {
	mu      sync.Mutex
	buckets map[rateKey]*bucket
}

type rateKey struct {
	subject, principal string
}

type bucket struct {
	tokens float64
	last   time.Time
	rate   float64
	burst  float64
}

func newRateLimiter() *rateLimiter { return &rateLimiter{buckets: map[rateKey]*bucket{}} }

// allow takes one token for (s, principal) at now.
func (l *rateLimiter) allow(s *subject, principal string, now time.Time) bool {
	return l.take(rateKey{s.name, principal}, *s.rate, now)
}

// take takes one token from k's bucket, refilled at rp, at now. Subject
// names are never empty, so a key with an empty subject is free for limits
// that are not per subject (negotiation).
func (l *rateLimiter) take(k rateKey, rp RateLimitPolicy, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[k]
	if b == nil || b.rate != rp.PerSecond || b.burst != float64(rp.Burst) {
		b = &bucket{tokens: float64(rp.Burst), last: now, rate: rp.PerSecond, burst: float64(rp.Burst)}
		l.buckets[k] = b
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
