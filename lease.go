package pigeon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"pigeon/store"
)

// DefaultGroup is the consumer group of pull receivers and of subscribers
// that name none, on work-queue and request/reply subjects.
const DefaultGroup = "default"

// consumerGroup names the consumer group that a receiver joins on a
// work-queue or request/reply subject. A receiver that sees every message
// joins its named group (DefaultGroup when it names none). Members that
// select differently cannot share one queue position, so a receiver that
// sees a selection joins a competing group of its own per selection:
//
//   - a pull receiver (o == nil) selects by its receive scope alone:
//     "default|scope:SCOPE";
//   - a push subscriber with a selector or a filter in o, or a receive
//     scope: "GROUP|SELECTOR|FILTER|SCOPE", sel being o.Selector parsed;
//     when one of the three holds '|' (a selector's value, a filter's
//     "||", a scope's value may), the key would be ambiguous, and it is
//     "GROUP||" and each of the three as its length, ':' and itself
//     (separated), which no key of the first form spells (a selector
//     starts with '/');
//   - when the filter reads `principal`, the same filter selects
//     differently for each principal (message.data.owner ==
//     principal.id): the key has a fourth part, "principal:" and a digest
//     of who (its id, roles and attributes, which the filter sees), in
//     either form; otherwise members of one group with such a filter
//     shared a queue position, and a message one member's filter refused
//     was done for all of them, lost to the member it was for.
//
// The names are the groups' keys in the store: changing an encoding loses
// the progress of every group written under it.
func consumerGroup(scope *permit, o *SubscribeOptions, sel Selector, who *Principal) string {
	if o == nil {
		if scope.scoped(OpReceive) {
			return DefaultGroup + "|scope:" + scope.scopeKey(OpReceive)
		}
		return DefaultGroup
	}
	g := o.Group
	if g == "" {
		g = DefaultGroup
	}
	if o.Selector != "" || o.Filter != "" || scope.scoped(OpReceive) {
		parts := []string{sel.String(), o.Filter, scope.scopeKey(OpReceive)}
		if strings.Contains(o.Filter, "principal") {
			parts = append(parts, filterPrincipalKey(who))
		}
		if !slices.ContainsFunc(parts, func(p string) bool { return strings.Contains(p, "|") }) {
			return g + "|" + strings.Join(parts, "|")
		}
		g += "||"
		for _, p := range parts {
			g += strconv.Itoa(len(p)) + ":" + p
		}
	}
	return g
}

// filterPrincipalKey is the part of a group's key that tells apart the
// principals a filter reading `principal` is evaluated for: a digest of
// the id, roles and attributes it sees.
func filterPrincipalKey(p *Principal) string {
	var who struct {
		ID         string            `json:"id"`
		Roles      []string          `json:"roles"`
		Attributes map[string]string `json:"attributes"`
	}
	if p != nil {
		who.ID, who.Roles, who.Attributes = p.ID, slices.Sorted(slices.Values(p.Roles)), p.Attributes
	}
	b, _ := json.Marshal(who) // map keys sorted: one text for one principal
	sum := sha256.Sum256(b)
	return "principal:" + hex.EncodeToString(sum[:16])
}

// MaxGroupName is the longest consumer group name, in bytes.
const MaxGroupName = 128

// checkGroupName refuses a consumer group name (empty: DefaultGroup) that
// could be taken for another group's key: the engine keys a group by its
// name, then '|' and the subscription's selector, filter and scope, and
// keys pull cursors "cursor:" and a principal. A name holding '|' could
// spell the key of a group scoped to other routes, and one starting with
// "cursor:" would be taken for a cursor, whose leases are not shared in a
// cluster. Invalid UTF-8, names longer than MaxGroupName and names
// holding a control or formatting character (hasControl: C0, DEL, C1,
// U+202E and the other characters that reorder or break a line; a group's
// name is listed, audited and shown as any other name) are refused too
// (INVALID_ARGUMENT).
func checkGroupName(g string) error {
	switch {
	case len(g) > MaxGroupName:
		return NewError(CodeInvalidArgument, "a group name is at most %d bytes", MaxGroupName)
	case strings.HasPrefix(g, cursorPrefix):
		return NewError(CodeInvalidArgument, "a group name may not start with %q", cursorPrefix)
	case !utf8.ValidString(g):
		return NewError(CodeInvalidArgument, "a group name must be UTF-8")
	case strings.IndexByte(g, '|') >= 0:
		return NewError(CodeInvalidArgument, "a group name may not hold '|'")
	case hasControl(g):
		return NewError(CodeInvalidArgument, "a group name may not hold a control or formatting character")
	}
	return nil
}

// cursorPrefix starts the group key of every pull cursor.
const cursorPrefix = "cursor:"

// cursorKey is the store key of a principal's pull cursor on a pubsub
// subject.
func cursorKey(subject, principal string) store.GroupKey {
	return store.GroupKey{Subject: subject, Group: cursorPrefix + principal}
}

// pushHolder starts the lease holder of a push subscription, its id
// behind it. A pull consumer's leases are held by its principal's id (Ack
// and Nack compare it), and a subscription's id ("sub_7") is a valid
// account id: without the prefix, a principal so named could settle, as
// its own, the messages leased to that subscription. The byte 0xFF is in
// no UTF-8 text, so no principal id (each one comes from a token, a
// certificate or the directory, as text) spells a push holder.
const pushHolder = "\xff"

// holder is the lease holder of the subscription's work-queue leases.
func (s *subscription) holder() string { return s.leaseHolder }

// lease is one in-flight delivery.
type lease struct {
	holder   string
	deadline time.Time
	attempt  int
	busy     bool // an in-process handler is running: the lease does not expire
	// lost: busy, and the cluster found this node's lease of the message
	// lost (keepShared): it is not extended again, its handler is told,
	// and its answer settles nothing (settle, settleAll). deadline is,
	// while busy, when the cluster lease runs out for the other nodes.
	lost bool
	// contract is the contract a pull receive took the lease under (""
	// for a push subscription's, which gives its leases back as it stops):
	// its revocation gives the lease back (releaseRevoked).
	contract string
}

// heldBy reports whether l (nil: no lease) is held by the pull holder
// holder (a principal's id) under attempt: its current attempt, or any
// when attempt is 0 (a pull answer that names none, protocol v1). A
// principal's connections share its leases; the attempt tells a late
// answer to a lapsed lease from the answer to the lease that followed it.
func (l *lease) heldBy(holder string, attempt int) bool {
	return l != nil && l.holder == holder && (attempt == 0 || l.attempt == attempt)
}

// free ends the lease's holding: nobody holds it, and it falls due at
// due (now: at once; later: a nack's or a failure's delay).
func (l *lease) free(due time.Time) {
	l.holder, l.contract, l.busy, l.lost, l.deadline = "", "", false, false, due
}

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

// unleaseLocked ends holder's leases of seqs at now, giving their
// attempts back when uncount is set (a message never handed over), and
// returns the sequences it ended, for releaseShared. g.mu must be held.
func (e *Engine) unleaseLocked(ctx context.Context, g *group, holder string, seqs []uint64, uncount bool, now time.Time) []uint64 {
	var back []uint64
	for _, seq := range seqs {
		if l := g.leases[seq]; l != nil && l.holder == holder {
			if uncount {
				e.uncount(ctx, g, seq, l.attempt)
			}
			l.free(now)
			back = append(back, seq)
		}
	}
	return back
}

// markDone records seq as done for a reason other than an answer (a
// message the group skips, one whose attempts ran out, one retention
// trimmed), then ends this node's cluster lease of it; g.mu must be held.
// An answer goes through markDoneAll, which settles the lease first.
func (e *Engine) markDone(ctx context.Context, g *group, seq uint64) error {
	if g.prog.IsDone(seq) {
		return nil
	}
	if err := e.store.MarkDone(ctx, g.key, seq); err != nil {
		return storeError(err)
	}
	g.setDone(seq)
	e.releaseShared(ctx, g, true, time.Time{}, seq)
	return nil
}

// releaseShared ends this node's cluster-wide leases of seqs (see
// Leaser.Release). A failure is logged, not returned: the store already
// holds the outcome, and the lease runs out by itself. A done release
// the cluster refuses ACK_NOT_ALLOWED (the lease is not this node's: a
// trimmed message may be one it never leased) is not logged: the
// message is done for the group either way.
func (e *Engine) releaseShared(ctx context.Context, g *group, done bool, retryAt time.Time, seqs ...uint64) {
	if !e.shared(g) {
		return
	}
	for _, seq := range seqs {
		err := e.opts.Cluster.Release(ctx, g.key, seq, done, retryAt)
		if err != nil && !(done && ErrorCode(err) == CodeAckNotAllowed) {
			e.opts.Logger.Warn("pigeon: releasing a cluster lease failed", "subject", g.key.Subject, "seq", seq, "err", err)
		}
	}
}

// setDone records seq as done in memory (store.GroupState.MarkDone), drops
// its lease and attempts and moves next past the floor; g.mu must be held.
func (g *group) setDone(seq uint64) {
	if g.prog.IsDone(seq) {
		return
	}
	delete(g.leases, seq)
	delete(g.attempts, seq)
	delete(g.unspent, seq)
	delete(g.exhausted, seq)
	g.prog.MarkDone(seq)
	if g.next <= g.prog.Floor {
		g.next = g.prog.Floor + 1
	}
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
			err := e.opts.Cluster.Release(ctx, g.key, seq, true, time.Time{})
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

// writeDone records seqs as done in the store, with one write where the
// store can batch them, then in g; g.mu must be held.
func (e *Engine) writeDone(ctx context.Context, g *group, seqs []uint64) error {
	bp, ok := e.store.(store.BatchProgress)
	if !ok || len(seqs) < 2 {
		for _, seq := range seqs {
			if g.prog.IsDone(seq) {
				continue
			}
			if err := e.store.MarkDone(ctx, g.key, seq); err != nil {
				return storeError(err)
			}
			g.setDone(seq)
		}
		return nil
	}
	if err := bp.MarkDoneBatch(ctx, g.key, seqs); err != nil {
		return storeError(err)
	}
	for _, seq := range seqs {
		g.setDone(seq)
	}
	return nil
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
			e.uncount(ctx, g, seq, l.attempt)
		}
		l.free(now)
		back = append(back, seq)
	}
	return settled, back
}

// requeue makes seq due again after a lease attempt failed part-way (the
// store refused the attempt, or the caller went away), so that no message
// is left neither leased, done nor due; g.mu must be held. The last
// sequence read, with no attempt recorded, is read again instead (next
// moves back to it): a redelivery due is then always one the store
// records, and does not keep the group in memory (group.idle).
func (g *group) requeue(seq uint64) {
	if g.prog.IsDone(seq) || g.leases[seq] != nil {
		return
	}
	if _, counted := g.attempts[seq]; !counted && seq+1 == g.next {
		g.next = seq
		return
	}
	g.retry = append(g.retry, seq)
}

// leaseBatch leases up to max messages of g to holder, each lease naming
// contract (leaseMsg): first those whose
// lease expired or whose nack delay passed, then new ones. A message that
// match rejects is done for this group (skipped). With busy (a push
// subscription's leases, handed to its handlers next) the leases it
// returns are held while their handlers run (lease.busy) from the moment
// they are taken: marked later, once g was let go, a lease whose ack wait
// had passed meanwhile could go to another consumer of the group first.
func (e *Engine) leaseBatch(ctx context.Context, g *group, s *subject, holder, contract string, max, budget int, busy bool, match func(*decoded) bool) ([]*decoded, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := e.now()
	var out []*decoded
	size := 0
	// full reports whether the batch is done: max messages, or budget
	// (when > 0) bytes of them, the next one unread.
	full := func() bool { return len(out) >= max || (budget > 0 && size >= budget) }
	take := func(d *decoded, err error) error {
		if err != nil || d == nil {
			return err
		}
		if match != nil && !match(d) {
			if err := e.markDone(ctx, g, d.seq); err != nil {
				// Not recorded skipped: the lease just taken for it ends
				// at once, its attempt given back (nobody was handed
				// it), rather than hold the message from the group's
				// other members until its ack wait with an attempt spent.
				back := e.unleaseLocked(ctx, g, holder, []uint64{d.seq}, true, now)
				e.releaseShared(ctx, g, false, now, back...)
				return err
			}
			return nil
		}
		out = append(out, d)
		size += int(d.size)
		return nil
	}
	for seq, l := range g.leases {
		if !l.busy && !now.Before(l.deadline) {
			delete(g.leases, seq)
			g.retry = append(g.retry, seq)
		}
	}
	sort.Slice(g.retry, func(i, j int) bool { return g.retry[i] < g.retry[j] })
	for len(g.retry) > 0 && !full() {
		seq := g.retry[0]
		g.retry = g.retry[1:]
		if g.prog.IsDone(seq) || g.leases[seq] != nil {
			continue
		}
		if err := take(e.leaseOne(ctx, g, s, seq, holder, contract, now)); err != nil {
			g.requeue(seq)
			return out, err
		}
	}
	for !full() {
		n := max - len(out)
		if budget > 0 {
			n = min(n, readChunk)
		}
		sms, err := e.store.Read(ctx, s.name, g.next, n)
		if err != nil {
			return out, storeError(err)
		}
		if len(sms) == 0 {
			break
		}
		for _, sm := range sms {
			if full() {
				break
			}
			g.next = sm.Seq + 1
			if g.prog.IsDone(sm.Seq) || g.leases[sm.Seq] != nil {
				continue
			}
			if err := take(e.leaseMsg(ctx, g, s, sm, holder, contract, now)); err != nil {
				g.requeue(sm.Seq)
				return out, err
			}
		}
	}
	if busy {
		for _, d := range out {
			if l := g.leases[d.seq]; l != nil {
				l.busy = true
			}
		}
	}
	return out, nil
}

// leaseOne leases seq, reading it from the store.
func (e *Engine) leaseOne(ctx context.Context, g *group, s *subject, seq uint64, holder, contract string, now time.Time) (*decoded, error) {
	sms, err := e.store.Read(ctx, s.name, seq, 1)
	if err != nil {
		return nil, storeError(err)
	}
	if len(sms) == 0 || sms[0].Seq != seq {
		// Trimmed by retention, with every sequence before the first
		// kept: nothing left to deliver.
		if err := e.raisePastTrimmed(ctx, g); err != nil {
			return nil, storeError(err)
		}
		return nil, e.markDone(ctx, g, seq)
	}
	return e.leaseMsg(ctx, g, s, sms[0], holder, contract, now)
}

// leaseMsg starts the next attempt of sm for holder, or exhausts it. The
// lease names contract, a pull receive's (lease.contract), "" for a push
// subscription's.
//
// In a cluster-shared group the cluster counts the attempt as it leases
// the message (Leaser.Acquire). When the store then refuses to record the
// attempt, nobody is handed the message, and the cluster lease stays this
// node's until its deadline: it is kept (group.unspent), and the next
// lease of the message here, while it holds, takes it over, its attempt
// as the cluster counted it, with the deadline the cluster holds it to.
// Acquired again instead, it was counted again (a Leaser counts every
// acquire, of a lease its node holds or released too), and a message
// could run out of attempts with fewer deliveries. A store that fails
// past the lease's deadline spends one attempt per ack wait so, as a
// node that stops between its lease and its delivery does.
func (e *Engine) leaseMsg(ctx context.Context, g *group, s *subject, sm store.Message, holder, contract string, now time.Time) (*decoded, error) {
	n := g.attempts[sm.Seq] + 1
	deadline := now.Add(s.ackWait)
	shared := e.shared(g)
	if shared {
		kept, ok := g.unspent[sm.Seq]
		delete(g.unspent, sm.Seq)
		if ok && now.Before(kept.until) {
			n, deadline = kept.attempt, kept.until
		} else {
			st, err := e.opts.Cluster.Acquire(ctx, g.key, sm.Seq, deadline)
			switch {
			case err != nil:
				return nil, storeError(err)
			case st.Done:
				// A node settled it. The group's progress may not say so
				// yet: an answer settles the cluster lease before it
				// writes the progress, and that write may have failed, or
				// its node stopped between the two. Written again (no
				// change when it is there), so that the progress catches
				// up.
				if err := e.store.MarkDone(ctx, g.key, sm.Seq); err != nil {
					return nil, storeError(err)
				}
				g.setDone(sm.Seq)
				return nil, nil
			case !st.Acquired:
				// Another node's: look again when its lease ends.
				g.leases[sm.Seq] = &lease{deadline: st.Until, attempt: g.attempts[sm.Seq]}
				return nil, nil
			}
			n = st.Attempt
		}
	}
	if n > s.maxAtt {
		return nil, e.exhaust(ctx, g, s, sm)
	}
	if err := e.store.MarkAttempt(ctx, g.key, sm.Seq, n); err != nil {
		if shared {
			g.keepUnspent(sm.Seq, clusterLease{attempt: n, until: deadline})
		}
		return nil, storeError(err)
	}
	g.attempts[sm.Seq] = n
	g.leases[sm.Seq] = &lease{holder: holder, contract: contract, deadline: deadline, attempt: n}
	if n > 1 {
		e.note(NoteRedelivery, s.name)
	}
	d, err := e.decode(sm)
	if err != nil {
		return nil, err
	}
	return d, nil
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

// leaseFor leases up to n messages of the subscription's group to it,
// with each one's delivery attempt. It also returns until, when the first
// of their leases runs out (zero: none is held), and when the next lease
// of the group falls due. A lease runs out one ack wait after the batch
// began, in the cluster too, however long the batch's store calls took
// (a round trip or more per message on a networked store): the first
// extension of the batch's leases is due from until (keepShared), not
// from the moment the batch is handed over.
func (e *Engine) leaseFor(s *subscription, n int) (msgs []*decoded, attempts []int, until time.Time, next time.Duration, err error) {
	g := s.g
	match := func(d *decoded) bool { return s.matches(d) && s.selects(d) }
	msgs, err = e.leaseBatch(s.ctx, g, s.subj, s.holder(), "", n, 0, true, match)
	if err != nil {
		// What the batch leased before the store failed was never handed
		// over: back to the group at once, uncounted, rather than held
		// until its ack wait with an attempt spent.
		ctx := context.WithoutCancel(s.ctx)
		for _, d := range msgs {
			_ = e.settle(ctx, s, d, ErrUndelivered)
		}
		return nil, nil, time.Time{}, 0, err
	}
	attempts = make([]int, len(msgs))
	g.mu.Lock()
	now := e.now()
	for i, d := range msgs {
		// Held while the handler runs (busy), the lease is still the
		// subscription's, unless a trim or a purge ended it meanwhile.
		if l := g.leases[d.seq]; l != nil {
			attempts[i] = l.attempt
			if until.IsZero() || l.deadline.Before(until) {
				until = l.deadline
			}
		}
	}
	for _, l := range g.leases {
		if l.busy {
			continue
		}
		if d := l.deadline.Sub(now); d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	g.mu.Unlock()
	return msgs, attempts, until, next, nil
}

// settle acks or nacks a leased message of a subscription. A lease the
// cluster reported lost (lease.lost) is settled by none of its answers:
// it is let go here at once, and the node asks the cluster again, which
// has the message leased to another node, or done. An ack the cluster
// refuses (markDoneAll: the lease ran out and another node took it) is
// refused as refuseLost refuses one, audited ack.denied ACK_NOT_ALLOWED,
// and its error returned.
func (e *Engine) settle(ctx context.Context, s *subscription, d *decoded, handlerErr error) error {
	g, seq := s.g, d.seq
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.leases[seq]
	if l == nil || l.holder != s.holder() {
		return nil
	}
	if l.lost {
		// Not released in the cluster: the lease there is not this
		// node's, and a release marked done would end the other node's.
		l.free(e.now())
		return nil
	}
	if handlerErr == nil {
		refused, err := e.markDoneAll(ctx, g, []uint64{seq})
		if len(refused) > 0 {
			e.refusedAnswer(s, d, nil)
			return errLeaseLost()
		}
		if err != nil {
			e.unrecorded(ctx, g, s.holder(), []uint64{seq}, false, e.now())
		}
		return err
	}
	if errors.Is(handlerErr, ErrUndelivered) {
		// Back at once, as the attempt before it.
		delete(g.leases, seq)
		e.uncount(ctx, g, seq, l.attempt)
		g.retry = append(g.retry, seq)
		e.releaseShared(ctx, g, false, e.now(), seq)
		return nil
	}
	l.free(e.now().Add(e.retryDelay(s.subj, l.attempt, handlerErr)))
	e.releaseShared(ctx, g, false, l.deadline, seq)
	return nil
}

// uncount gives attempt n of seq back: it never reached a consumer, so
// the count is n-1 again, in the store as in g, and the group may leave
// memory (group.idle) without spending the attempt. The Leaser, not the
// store, counts the attempts of a cluster-shared group. When the store
// refuses the write, the attempt stays spent, as after a crash between
// the lease and the give-back: one attempt too many, never one too few.
// g.mu must be held.
func (e *Engine) uncount(ctx context.Context, g *group, seq uint64, n int) {
	if !e.shared(g) {
		if err := e.store.MarkAttempt(ctx, g.key, seq, n-1); err != nil {
			e.opts.Logger.Warn("pigeon: giving a delivery attempt back failed; it stays spent", "subject", g.key.Subject, "seq", seq, "err", err)
			return
		}
	}
	g.attempts[seq] = n - 1
}

// retryDelay is the wait before the next delivery of a message of s after
// attempt n failed with err: the delay err asks for (RetryAfter, at most
// MaxRetryDelay), otherwise the subject's backoff (nil err: a Nack that
// names no delay). The backoff is fixed, linear or exponential from one
// second, capped at the subject's maximum delay, then scaled by
// Options.RetryBase. It is the one backoff of the broker, for push and
// pull alike.
func (e *Engine) retryDelay(s *subject, n int, err error) time.Duration {
	var re *RetryError
	if errors.As(err, &re) && re.Delay >= 0 {
		return min(re.Delay, MaxRetryDelay)
	}
	base := time.Second
	var d time.Duration
	switch s.backoff {
	case "fixed":
		d = base
	case "linear":
		d = base * time.Duration(n)
	default:
		n = min(max(n, 1), 30) // a shift by a negative count panics
		d = base << (n - 1)
	}
	if d > s.maxDelay {
		d = s.maxDelay
	}
	return time.Duration(float64(d) * float64(e.opts.RetryBase) / float64(time.Second))
}

// giveBack returns the leases of msgs, just taken by holder in group and
// never handed over, to the group at once, their attempts uncounted.
func (e *Engine) giveBack(ctx context.Context, s *subject, group, holder string, msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	g, err := e.group(ctx, store.GroupKey{Subject: s.name, Group: group})
	if err != nil {
		return // the leases run out by themselves
	}
	defer e.releaseGroup(g)
	ctx = context.WithoutCancel(ctx)
	seqs := make([]uint64, len(msgs))
	for i, m := range msgs {
		seqs[i] = m.Sequence
	}
	g.mu.Lock()
	now := e.now()
	back := e.unleaseLocked(ctx, g, holder, seqs, true, now)
	g.mu.Unlock()
	e.releaseShared(ctx, g, false, now, back...)
	e.pokeGroup(s.name)
}

// releaseLeases gives a departing subscription's leases back to its group.
func (e *Engine) releaseLeases(s *subscription) {
	g, ctx := s.g, context.WithoutCancel(s.ctx)
	g.mu.Lock()
	now := e.now()
	var mine []uint64
	holder := s.holder()
	for seq, l := range g.leases {
		if l.holder != holder {
			continue
		}
		if !l.busy {
			// Leased as the subscription stopped, never handed to the
			// handler: the attempt does not count.
			e.uncount(ctx, g, seq, l.attempt)
		}
		if !l.lost { // a lost lease is not this node's to release
			mine = append(mine, seq)
		}
		l.free(now)
	}
	g.mu.Unlock()
	e.releaseShared(ctx, g, false, now, mine...)
	e.pokeGroup(s.subj.name)
}

// pokeGroup wakes every group subscriber of subject.
func (e *Engine) pokeGroup(subject string) {
	if f := e.fanoutOf(subject); f != nil {
		f.pokeGroups()
	}
}

// releaseRevoked gives the leases pull receives took under contract id
// back to their groups at once, their attempts spent: a revoked consumer
// can no longer ack them (its contract is refused), so waiting out their
// ack wait would only hold them from the group's other consumers. It
// waits for each group in turn (a lease being taken holds the group over
// a store read), so revocations run it on a goroutine of their own.
func (e *Engine) releaseRevoked(id string) {
	t := &e.groups
	t.mu.Lock()
	gs := make([]*group, 0, len(t.m))
	for _, g := range t.m {
		gs = append(gs, g)
	}
	t.mu.Unlock()
	ctx := context.WithoutCancel(e.ctx)
	for _, g := range gs {
		select {
		case <-g.loaded:
		default:
			continue // still loading: no lease of it was taken yet
		}
		g.mu.Lock()
		now := e.now()
		var seqs []uint64
		for seq, l := range g.leases {
			if l.contract == id && l.holder != "" {
				l.free(now)
				seqs = append(seqs, seq)
			}
		}
		g.mu.Unlock()
		if len(seqs) > 0 {
			e.releaseShared(ctx, g, false, now, seqs...)
			e.pokeGroup(g.key.Subject)
		}
	}
}
