package pigeon

import (
	"context"
	"time"
)

// letGo is a cluster lease this node gives up before its deadline
// (released, not done), for letGoShared: of seq and, when attempt > 0,
// given back uncounted at attempt (LeaseReturner.Return); 0: released,
// its attempt spent (Leaser.Release).
type letGo struct {
	seq     uint64
	attempt int
}

// returns reports whether g's cluster leases can be given back
// uncounted (LeaseReturner).
func (e *Engine) returns(g *group) bool {
	_, ok := e.opts.Cluster.(LeaseReturner)
	return ok && e.shared(g)
}

// uncount gives back the attempt of l, holder's lease of seq: it never
// reached a consumer, so the count is one less again, in the store as in
// g, and the group may leave memory (group.idle) without spending the
// attempt. When the store refuses the write, the attempt stays spent, as
// after a crash between the lease and the give-back: one attempt too
// many, never one too few. g.mu must be held; now is the engine's clock.
//
// In a cluster-shared group the Leaser counts the attempts, as it leases
// a message. With a LeaseReturner, uncount returns the attempt for
// letGoShared to give the cluster lease back uncounted, once the store's
// count is lowered: a Leaser may count from the store's attempts too
// (store/jetstream counts from the larger), and the store's count is
// lowered while the lease is still this node's, so that no node takes the
// lease meanwhile and counts from the store's higher one. A lease whose
// deadline has passed may be another node's by now, and a write of the
// store's count could lower that node's: it is released instead, its
// attempt spent, as is one whose store write fails (0 returned). Without
// a LeaseReturner only g is lowered, and the Leaser counts the attempt
// again, as before.
func (e *Engine) uncount(ctx context.Context, g *group, seq uint64, l *lease, now time.Time) int {
	n := l.attempt
	returns := e.returns(g)
	if returns && !now.Before(l.deadline) {
		return 0
	}
	if !e.shared(g) || returns {
		if err := e.store.MarkAttempt(ctx, g.key, seq, n-1); err != nil {
			e.opts.Logger.Warn("pigeon: giving a delivery attempt back failed; it stays spent", "subject", g.key.Subject, "seq", seq, "err", err)
			return 0
		}
	}
	g.attempts[seq] = n - 1
	if returns {
		return n
	}
	return 0
}

// letGoShared ends this node's cluster leases ls before their deadlines,
// due again at retryAt: each one with an attempt is given back uncounted
// (LeaseReturner.Return), the others are released, their attempts spent
// (Leaser.Release, not done). A return the cluster refuses
// (ACK_NOT_ALLOWED: the lease is not this node's at that attempt any
// more; another node took it after it ran out, or this node leased the
// message again meanwhile) is left so: another lease holds. Any other
// failure is logged, not returned: the lease runs out by itself.
func (e *Engine) letGoShared(ctx context.Context, g *group, retryAt time.Time, ls ...letGo) {
	if !e.shared(g) {
		return
	}
	r, _ := e.opts.Cluster.(LeaseReturner)
	for _, l := range ls {
		if l.attempt <= 0 || r == nil {
			e.releaseShared(ctx, g, false, retryAt, l.seq)
			continue
		}
		if err := r.Return(ctx, g.key, l.seq, l.attempt, retryAt); err != nil && ErrorCode(err) != CodeAckNotAllowed {
			e.opts.Logger.Warn("pigeon: giving a cluster lease back failed", "subject", g.key.Subject, "seq", l.seq, "err", err)
		}
	}
}

// unspent deals with cl, this node's cluster lease of seq, acquired for
// an attempt the store then refused to record (leaseMsg): nobody was
// handed the message. With a LeaseReturner it is given back at once,
// uncounted: the message is due again now, on any node, as the same
// attempt. When that fails, the lease is left to run out (given back or
// not, it is not taken over: another node may hold it by now). Without
// one, it is kept (group.unspent), and the next lease of seq here takes
// it over while it holds, rather than acquire it again and spend one more
// attempt. g.mu must be held.
func (e *Engine) unspent(ctx context.Context, g *group, seq uint64, cl clusterLease, now time.Time) {
	r, ok := e.opts.Cluster.(LeaseReturner)
	if !ok {
		g.keepUnspent(seq, cl)
		return
	}
	if err := r.Return(ctx, g.key, seq, cl.attempt, now); err != nil && ErrorCode(err) != CodeAckNotAllowed {
		e.opts.Logger.Warn("pigeon: giving back a cluster lease whose attempt the store did not record failed; it runs out by itself", "subject", g.key.Subject, "seq", seq, "err", err)
	}
}
