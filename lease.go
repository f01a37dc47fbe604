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

// held reports whether a consumer of this node holds l: not freed (a
// nack's or a failure's delay, a lease given back), settled, another
// node's (a lease this node found taken keeps its deadline only), nor
// lost to another node (its handler may still run, but the cluster has
// the message leased elsewhere, and that node counts it).
func (l *lease) held() bool { return l.holder != "" && !l.lost }

// free ends the lease's holding: nobody holds it, and it falls due at
// due (now: at once; later: a nack's or a failure's delay).
func (l *lease) free(due time.Time) {
	l.holder, l.contract, l.busy, l.lost, l.deadline = "", "", false, false, due
}

// unleaseLocked ends holder's leases of seqs at now, giving their
// attempts back when uncount is set (a message never handed over), and
// returns the leases it ended, for letGoShared. g.mu must be held.
func (e *Engine) unleaseLocked(ctx context.Context, g *group, holder string, seqs []uint64, uncount bool, now time.Time) []letGo {
	var back []letGo
	for _, seq := range seqs {
		if l := g.leases[seq]; l != nil && l.holder == holder {
			b := letGo{seq: seq, attempt: l.attempt}
			if uncount {
				b.uncounted = e.uncount(ctx, g, seq, l, now)
			}
			l.free(now)
			back = append(back, b)
		}
	}
	return back
}

// markDone records seq as done for a reason other than an answer (a
// message the group skips, one whose attempts ran out, one retention
// trimmed), then ends this node's cluster lease of it at attempt (see
// group.leaseAttempt); g.mu must be held. An answer goes through
// markDoneAll, which settles the lease first.
func (e *Engine) markDone(ctx context.Context, g *group, seq uint64, attempt int) error {
	if g.prog.IsDone(seq) {
		return nil
	}
	if err := e.store.MarkDone(ctx, g.key, seq); err != nil {
		return storeError(err)
	}
	g.setDone(seq)
	e.releaseAt(ctx, g, true, time.Time{}, letGo{seq: seq, attempt: attempt})
	return nil
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
			if err := e.markDone(ctx, g, d.seq, g.leaseAttempt(d.seq)); err != nil {
				// Not recorded skipped: the lease just taken for it ends
				// at once, its attempt given back (nobody was handed
				// it), rather than hold the message from the group's
				// other members until its ack wait with an attempt spent.
				back := e.unleaseLocked(ctx, g, holder, []uint64{d.seq}, true, now)
				e.letGoShared(ctx, g, now, back...)
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
		return nil, e.markDone(ctx, g, seq, g.leaseAttempt(seq))
	}
	return e.leaseMsg(ctx, g, s, sms[0], holder, contract, now)
}

// leaseMsg starts the next attempt of sm for holder, or exhausts it. The
// lease names contract, a pull receive's (lease.contract), "" for a push
// subscription's.
//
// In a cluster-shared group the cluster counts the attempt as it leases
// the message (Leaser.Acquire). When the store then refuses to record the
// attempt, nobody is handed the message: a Leaser that can (LeaseReturner)
// is given the lease back at once, uncounted, and the message is due
// again, on any node, as the same attempt (Engine.unspent). Otherwise the
// cluster lease stays this node's until its deadline: it is kept
// (group.unspent), and the next lease of the message here, while it
// holds, takes it over, its attempt as the cluster counted it, with the
// deadline the cluster holds it to. Acquired again instead, it was
// counted again (a Leaser counts every acquire, of a lease its node holds
// or released too), and a message could run out of attempts with fewer
// deliveries. A store that fails past the lease's deadline spends one
// attempt per ack wait so, as a node that stops between its lease and its
// delivery does.
//
// A store write that succeeds but returns once the lease's deadline has
// passed (by the engine's clock) hands nobody the message either: the
// lease ran out for the other nodes meanwhile, and one of them may hold
// it and run the message. The attempt stays spent (the store recorded
// it), the cluster lease is released at it (Leaser.Release, not done; a
// release the cluster refuses, the lease being another node's now,
// changes nothing), and the message is due again at once, to whichever
// node the cluster leases it next. Handed over, it ran on two nodes at
// once.
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
		return nil, e.exhaust(ctx, g, s, sm, n)
	}
	// MarkAttempt only raises the store's count: in a cluster-shared
	// group this write may land after this node's lease ran out and
	// another node leased the message and recorded a later attempt, whose
	// count then stands.
	if err := e.store.MarkAttempt(ctx, g.key, sm.Seq, n); err != nil {
		if shared {
			e.unspent(ctx, g, sm.Seq, clusterLease{attempt: n, until: deadline}, now)
		}
		return nil, storeError(err)
	}
	g.attempts[sm.Seq] = n
	if shared {
		if at := e.now(); !at.Before(deadline) {
			// The write outlasted the lease: another node may hold it by
			// now and run the message. Not handed over: the lease is
			// given up, released at its attempt (spent, as the store
			// holds it), and the message is due again here at once, as
			// a lease freed (the next batch asks the cluster again).
			g.leases[sm.Seq] = &lease{deadline: at, attempt: n}
			e.releaseAt(ctx, g, false, at, letGo{seq: sm.Seq, attempt: n})
			return nil, nil
		}
	}
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
		now := e.now()
		delete(g.leases, seq)
		back := letGo{seq: seq, attempt: l.attempt, uncounted: e.uncount(ctx, g, seq, l, now)}
		g.retry = append(g.retry, seq)
		e.letGoShared(ctx, g, now, back)
		return nil
	}
	l.free(e.now().Add(e.retryDelay(s.subj, l.attempt, handlerErr)))
	e.releaseShared(ctx, g, false, l.deadline, seq)
	return nil
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
	e.letGoShared(ctx, g, now, back...)
	e.pokeGroup(s.name)
}

// releaseLeases gives a departing subscription's leases back to its group.
func (e *Engine) releaseLeases(s *subscription) {
	g, ctx := s.g, context.WithoutCancel(s.ctx)
	g.mu.Lock()
	now := e.now()
	var mine []letGo
	holder := s.holder()
	for seq, l := range g.leases {
		if l.holder != holder {
			continue
		}
		b := letGo{seq: seq, attempt: l.attempt}
		if !l.busy {
			// Leased as the subscription stopped, never handed to the
			// handler: the attempt does not count.
			b.uncounted = e.uncount(ctx, g, seq, l, now)
		}
		if !l.lost { // a lost lease is not this node's to release
			mine = append(mine, b)
		}
		l.free(now)
	}
	g.mu.Unlock()
	e.letGoShared(ctx, g, now, mine...)
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
		var ls []letGo
		for seq, l := range g.leases {
			if l.contract == id && l.holder != "" {
				l.free(now)
				ls = append(ls, letGo{seq: seq, attempt: l.attempt})
			}
		}
		g.mu.Unlock()
		if len(ls) > 0 {
			// Sent with the group let go: each names its attempt, and
			// leaves a lease this node took of the message since alone.
			e.releaseAt(ctx, g, false, now, ls...)
			e.pokeGroup(g.key.Subject)
		}
	}
}
