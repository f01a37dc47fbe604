package pigeon

import (
	"context"
	"slices"
	"time"
)

// extends reports whether g's cluster leases are extended while their
// handlers run (keepShared).
func (e *Engine) extends(g *group) bool {
	_, ok := e.opts.Cluster.(LeaseExtender)
	return ok && e.shared(g)
}

// keepShared extends the cluster leases of s's messages whose handlers
// run (lease.busy) before they run out for the other nodes, when the
// Cluster is a LeaseExtender: a lease with a third of its ack wait left,
// together with every other one of s with half of it left or less, in one
// LeaseExtender.Extend call, to one ack wait from now. Each lease is thus
// written at most twice per ack wait, however long its handler runs. It
// returns when it is next due (zero: s holds no such lease). A lease the
// cluster reports lost is logged and no longer extended, and its
// delivery is told (subscription.loseLeases): its handler's context is
// cancelled with ACK_NOT_ALLOWED as the cause (a transport's LeaseLost is
// called). Its answer settles nothing (settle): another node may run the
// message, and an ack here would mark it done under that node's lease.
// Only the subscription's loop calls it.
func (e *Engine) keepShared(s *subscription) time.Time {
	g := s.g
	if !e.extends(g) {
		return time.Time{}
	}
	x := e.opts.Cluster.(LeaseExtender)
	w := s.subj.ackWait
	holder := s.holder()
	g.mu.Lock()
	now := e.now()
	var seqs []uint64
	var next time.Time
	held := map[uint64]*lease{} // the leases extended: answered and leased again meanwhile, a sequence is another lease
	for seq, l := range g.leases {
		if l.holder != holder || !l.busy || l.lost {
			continue
		}
		if l.deadline.Sub(now) <= w/2 {
			seqs = append(seqs, seq)
			held[seq] = l
		} else if due := l.deadline.Add(-w / 3); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	g.mu.Unlock()
	if len(seqs) == 0 {
		return next
	}
	slices.Sort(seqs)
	deadline := now.Add(w)
	ctx, cancel := context.WithTimeout(s.ctx, max(w/3, time.Millisecond))
	lost, err := x.Extend(ctx, g.key, seqs, deadline)
	cancel()
	if err != nil {
		e.opts.Logger.Warn("pigeon: extending cluster leases failed; retrying", "subject", g.key.Subject, "leases", len(seqs), "err", err)
		// Again soon, while the leases are still held.
		return now.Add(max(w/12, time.Millisecond))
	}
	gone := make(map[uint64]bool, len(lost))
	for _, seq := range lost {
		gone[seq] = true
	}
	var lose []uint64
	g.mu.Lock()
	for _, seq := range seqs {
		l := g.leases[seq]
		if l == nil || l != held[seq] || l.holder != holder || !l.busy {
			continue // answered meanwhile
		}
		if gone[seq] {
			l.lost = true
			lose = append(lose, seq)
			continue
		}
		l.deadline = deadline
	}
	g.mu.Unlock()
	if len(lost) > 0 {
		e.opts.Logger.Warn("pigeon: running handlers' cluster leases were lost; another node may run their messages too: their handlers are told, their answers settle nothing",
			"subject", g.key.Subject, "group", g.key.Group, "leases", len(lost), "first", slices.Min(lost))
	}
	// Told after the group is let go (a transport's LeaseLost may answer
	// at once). No lease of s can be answered, settled and taken again
	// meanwhile: that is the loop's work, and the loop is here.
	s.loseLeases(lose)
	if due := deadline.Add(-w / 3); next.IsZero() || due.Before(next) {
		next = due
	}
	return next
}

// releaseShared ends this node's cluster-wide leases of seqs, each at the
// attempt of its lease here (group.leaseAttempt); g.mu must be held (a
// release sent once it is let go names its attempts: releaseAt).
func (e *Engine) releaseShared(ctx context.Context, g *group, done bool, retryAt time.Time, seqs ...uint64) {
	if !e.shared(g) {
		return
	}
	ls := make([]letGo, len(seqs))
	for i, seq := range seqs {
		ls[i] = letGo{seq: seq, attempt: g.leaseAttempt(seq)}
	}
	e.releaseAt(ctx, g, done, retryAt, ls...)
}

// releaseAt ends this node's cluster-wide leases ls, each at its attempt
// (see Leaser.Release); g.mu need not be held. A failure is logged, not
// returned: the store already holds the outcome, and the lease runs out
// by itself. A release the cluster refuses ACK_NOT_ALLOWED is not logged:
// the lease is not this node's at that attempt (another node took it, or
// this node leased the message again since, which the release must leave
// alone; a trimmed message may be one it never leased), and a done
// message is done for the group either way.
func (e *Engine) releaseAt(ctx context.Context, g *group, done bool, retryAt time.Time, ls ...letGo) {
	if !e.shared(g) {
		return
	}
	for _, l := range ls {
		err := e.opts.Cluster.Release(ctx, g.key, l.seq, l.attempt, done, retryAt)
		if err != nil && ErrorCode(err) != CodeAckNotAllowed {
			e.opts.Logger.Warn("pigeon: releasing a cluster lease failed", "subject", g.key.Subject, "seq", l.seq, "err", err)
		}
	}
}

// leaseAttempt is the attempt of this node's lease of seq: its lease's
// here, or the last attempt g counted of it when it holds no lease (one
// whose lease ran out, and was dropped). g.mu must be held.
func (g *group) leaseAttempt(seq uint64) int {
	if l := g.leases[seq]; l != nil {
		return l.attempt
	}
	return g.attempts[seq]
}

// markDoneAll records seqs, answered by their lease holders on this node
// (acknowledged), as done, with one store write where the store can
// batch them; g.mu must be held. In a cluster-shared group each one's
// cluster lease is settled first (Leaser.Release, done), and the group's
// progress, which every node shares, is written after it, only for the
// ones the cluster settled. One it refuses ACK_NOT_ALLOWED is not this
// node's to settle (its lease ran out here and another node took it
// over, and may run the message or have settled it; or it is gone): it
// is not recorded done, its lease here is let go at once (the node asks
// the cluster again, which has it leased elsewhere, or done), and it is
// returned in refused, for the caller to refuse the answer. Any other
// failure of a release is logged, and the message recorded done all the
// same: the lease runs out by itself. Written before the release, the
// progress marked a late answer's message done for every node while
// another node ran it.
func (e *Engine) markDoneAll(ctx context.Context, g *group, seqs []uint64) (refused []uint64, err error) {
	settled := seqs
	if e.shared(g) {
		settled = make([]uint64, 0, len(seqs))
		for _, seq := range seqs {
			if g.prog.IsDone(seq) {
				continue
			}
			err := e.opts.Cluster.Release(ctx, g.key, seq, g.leaseAttempt(seq), true, time.Time{})
			switch {
			case ErrorCode(err) == CodeAckNotAllowed:
				if l := g.leases[seq]; l != nil {
					l.free(e.now())
				}
				refused = append(refused, seq)
				continue
			case err != nil:
				e.opts.Logger.Warn("pigeon: releasing a cluster lease failed", "subject", g.key.Subject, "seq", seq, "err", err)
			}
			settled = append(settled, seq)
		}
	}
	return refused, e.writeDone(ctx, g, settled)
}

// unrecorded lets go, at once, of holder's leases of seqs after
// markDoneAll failed to record them done: a lease held for a settlement
// the store never recorded would hold its message for ever (a push
// subscription's lease is busy, and never runs out while the
// subscription lives; in a cluster it is extended). Each lease of holder
// still there is freed, due now. It returns those of seqs that stand
// settled all the same, and those that come back for another delivery:
//
//   - one the store recorded before the failure (a store without batch
//     writes records one at a time) is done;
//   - in a cluster-shared group, one markDoneAll settled in the cluster
//     first (Leaser.Release, done) is done for every node: the next lease
//     of it, here or on another node, finds it settled and writes the
//     group's progress again (leaseMsg), and hands nothing over. (One
//     whose release failed otherwise, which markDoneAll takes as settled
//     all the same, is not done in the cluster: it comes back.)
//   - any other is not done: it comes back, as a lease that ran out does,
//     at once, to any consumer of the group, its attempt counted (the
//     consumer was handed it), or given back when uncount is set (it never
//     reached one), as after a crash between the handler's answer and the
//     write. At least once: the message is handled again.
//
// A sequence markDoneAll refused (ACK_NOT_ALLOWED: another node's now)
// or whose lease is no longer holder's is neither. g.mu must be held.
func (e *Engine) unrecorded(ctx context.Context, g *group, holder string, seqs []uint64, uncount bool, now time.Time) (settled, back []uint64) {
	shared := e.shared(g)
	for _, seq := range seqs {
		if g.prog.IsDone(seq) {
			settled = append(settled, seq)
			continue
		}
		l := g.leases[seq]
		if l == nil || l.holder != holder {
			continue
		}
		if shared {
			// Not released again: the cluster holds it done, and a
			// release that is not done of a lease it settled is no change.
			l.free(now)
			settled = append(settled, seq)
			continue
		}
		if uncount {
			e.uncount(ctx, g, seq, l, now)
		}
		l.free(now)
		back = append(back, seq)
	}
	return settled, back
}

// clusterLease is a cluster lease this node acquired and handed to
// nobody (group.unspent): its attempt, and when it runs out for the
// other nodes.
type clusterLease struct {
	attempt int
	until   time.Time
}

// keepUnspent keeps l, this node's cluster lease of seq, for the next
// lease of seq here; g.mu must be held.
func (g *group) keepUnspent(seq uint64, l clusterLease) {
	if g.unspent == nil {
		g.unspent = map[uint64]clusterLease{}
	}
	g.unspent[seq] = l
}
