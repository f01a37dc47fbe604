package pigeon

import (
	"context"
	"errors"
	"time"

	"pigeon/store"
)

// letGo is a cluster lease this node gives up before its deadline
// (released, not done), for letGoShared: of seq, at attempt (the cluster
// lease's, LeaseState.Attempt), given back uncounted when uncounted is set
// (LeaseReturner.Return), otherwise released, its attempt spent
// (Leaser.Release). Either names the attempt, so that one sent after the
// group's lock was let go ends this lease, never the next one this node
// took meanwhile.
type letGo struct {
	seq       uint64
	attempt   int
	uncounted bool
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
// many, never one too few; so it does, when g leaves memory before the
// message is leased again, with a store that cannot lower a count (no
// store.AttemptLowerer: lowerAttempt lowers g's alone). g.mu must be
// held; now is the engine's clock.
//
// In a cluster-shared group the Leaser counts the attempts, as it leases
// a message. With a LeaseReturner, uncount reports whether letGoShared is
// to give the cluster lease back uncounted, once the store's count is
// lowered: a Leaser may count from the store's attempts too
// (store/jetstream counts from the larger), and the store's count is
// lowered while the lease is still this node's, so that no node takes the
// lease meanwhile and counts from the store's higher one. The store's
// count is lowered only from l's attempt (lowerAttempt: a compare-and-set,
// store.AttemptLowerer): another node that took the lease over and
// recorded a later attempt before the write landed keeps its count. A
// lease whose deadline has passed may be another node's by now: it is
// released instead, its attempt spent, as is one whose store write fails
// or is refused (false returned). Without a LeaseReturner only g is
// lowered, and the Leaser counts the attempt again, as before.
func (e *Engine) uncount(ctx context.Context, g *group, seq uint64, l *lease, now time.Time) bool {
	n := l.attempt
	returns := e.returns(g)
	if returns && !now.Before(l.deadline) {
		return false
	}
	if (!e.shared(g) || returns) && !e.lowerAttempt(ctx, g, seq, n) {
		return false
	}
	g.attempts[seq] = n - 1
	return returns
}

// lowerAttempt lowers the store's count of seq's attempts in g from n to
// n-1, for uncount to lower g's, and reports whether g's may be lowered:
// by compare-and-set (store.AttemptLowerer), so that a write landing
// after another node recorded a later attempt changes nothing.
//
// A store that cannot compare cannot lower at all: MarkAttempt only
// raises a count. In a cluster-shared group the attempt then stays spent.
// On one node nothing else writes the group's attempts, and only g is
// lowered: the store keeps n, which is the attempt the next lease of seq
// here takes again (its MarkAttempt changes nothing), so the two agree
// again once it is leased. Should g leave memory first (group.idle: the
// store holds an attempt of seq, so seq is due again once loaded) or the
// node stop, the count is loaded as the store keeps it: the attempt is
// spent, one too many, never one too few.
//
// A failure is logged; a refusal (the store holds another attempt) is
// not a failure. g.mu must be held.
func (e *Engine) lowerAttempt(ctx context.Context, g *group, seq uint64, n int) bool {
	lw, ok := e.store.(store.AttemptLowerer)
	if !ok {
		return !e.shared(g)
	}
	err := lw.LowerAttempt(ctx, g.key, seq, n, n-1)
	switch {
	case errors.Is(err, store.ErrChanged):
		e.opts.Logger.Info("pigeon: a delivery attempt was not given back: the store holds another attempt (another node leased the message since); it stays spent", "subject", g.key.Subject, "seq", seq, "attempt", n, "err", err)
	case err != nil:
		e.opts.Logger.Warn("pigeon: giving a delivery attempt back failed; it stays spent", "subject", g.key.Subject, "seq", seq, "err", err)
	}
	return err == nil
}

// letGoShared ends this node's cluster leases ls before their deadlines,
// due again at retryAt: each one uncounted is given back so
// (LeaseReturner.Return), the others are released, their attempts spent
// (Leaser.Release, not done), each at its attempt. A return or a release
// the cluster refuses (ACK_NOT_ALLOWED: the lease is not this node's at
// that attempt any more; another node took it after it ran out, or this
// node leased the message again meanwhile) is left so: another lease
// holds. Any other failure is logged, not returned: the lease runs out by
// itself. g.mu need not be held.
func (e *Engine) letGoShared(ctx context.Context, g *group, retryAt time.Time, ls ...letGo) {
	if !e.shared(g) {
		return
	}
	r, _ := e.opts.Cluster.(LeaseReturner)
	for _, l := range ls {
		if !l.uncounted || r == nil {
			e.releaseAt(ctx, g, false, retryAt, l)
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
