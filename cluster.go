package pigeon

import (
	"context"
	"strings"
	"time"

	"pigeon/store"
)

// Cluster connects an engine to the other engines (nodes) that share its
// Store: a store such as store/jetstream keeps one set of messages,
// contracts and accounts for all of them, and Cluster carries what each
// engine otherwise keeps in its own memory. Options.Cluster nil (one node)
// leaves every path as it is.
//
// Implementations are safe for concurrent use.
type Cluster interface {
	// Notify tells the other nodes of c, best effort (at most once): a
	// message this node appended (ChangeAppended), so their subscribers
	// get it without waiting for the fan-out's periodic look at the
	// store, or a reply whose requester waits on another node
	// (ChangeReply). A reply is carried whatever its size: a transport
	// whose messages are bounded (NATS max_payload) sends it in parts or
	// by reference, never drops it for its size.
	Notify(c ClusterChange)
	// Watch calls fn, from one goroutine, for every change another node
	// made to shared state, until ctx ends; it then returns ctx.Err().
	// It may also report changes this node made.
	Watch(ctx context.Context, fn func(ClusterChange)) error
	Leaser
}

// ClusterBarrier is an optional interface of a Cluster. A call that can
// take access away (a contract revoked; a role removed, redefined or
// deleted; an account deleted or its keys replaced; a grant revoked)
// returns only after Barrier confirmed that every live node has applied
// it, so the very next check on any node sees it.
type ClusterBarrier interface {
	// Barrier returns nil once every live node other than this one has
	// applied every change of shared access state (directory, contracts)
	// this node made, applied from the others, or read from the store
	// (a contract loaded revoked) before the call: a revocation retried
	// after CLUSTER_UNCONFIRMED may reach a node that applied it from
	// another, or loads the contract revoked before its watch delivered
	// the change, and has nothing to write (a contract or a grant revoked
	// already), and must still wait for the node that lagged. A node
	// that stopped showing signs of life is not waited for beyond the
	// implementation's liveness bound. It returns an error when a live
	// node did not confirm before ctx ends or the implementation's own
	// time limit passes; the change is made all the same.
	Barrier(ctx context.Context) error
}

// ClusterCurrent is an optional interface of a Cluster, which one whose
// barrier passes over nodes that show no sign of life (ClusterBarrier)
// must have: a node cut off from the others (the shared store
// unreachable from it, a watch that stalls without an error) is never
// told of their changes, and once the others stop waiting for it a
// revocation is reported done while it still serves on what it last
// applied. With it, the engine authorizes only until CurrentUntil: from
// then on every authorization that consults the access directory (every
// negotiation and every contract's next operation) is refused
// STORE_UNAVAILABLE, and running subscriptions deliver nothing (they
// pause, and go on once it vouches again, unless what this node then
// applied took their access away), until the Cluster vouches again. The
// engine asks again when that moment comes, and every 100 ms while it
// has passed.
type ClusterCurrent interface {
	// CurrentUntil returns the moment until which this node may go on
	// authorizing on the changes it has applied. A Cluster vouches for
	// it only while (1) no other node's barrier passes this node over
	// before it (every node waits for this one to apply its changes, or
	// fails unconfirmed, until a later moment, with room for the clocks
	// of the nodes to differ), and (2) this node has applied every change
	// a barrier may have passed it over for: after any spell in which the
	// others may have stopped waiting for it, the Cluster catches up with
	// every change made before its vouching was renewed before it
	// vouches again. The moment never moves back; zero means not yet. It
	// is called from the engine's own goroutine, and must be cheap.
	CurrentUntil() time.Time
}

// currentPoll is how often the engine asks a ClusterCurrent again while
// the moment it vouched for has passed.
const currentPoll = 100 * time.Millisecond

// ClusterReplyNotifier is an optional interface of a Cluster: Notify of
// a reply (ChangeReply) that says whether the notice was written. With
// it, a reply whose notice could not be written before ctx ends (the
// shared store lost its quorum, say) is answered CLUSTER_UNCONFIRMED: the
// reply is recorded and kept for a requester on this node, but one that
// waits on another node may get only its timeout, and the replier learns
// so rather than take it as delivered. Notify is still used for the other
// changes.
type ClusterReplyNotifier interface {
	NotifyReply(ctx context.Context, c ClusterChange) error
}

// ClusterSize is an optional interface of a Cluster: how many nodes are
// live. With it the engine shares each rate limit among them (see
// Options.NodeRateLimits).
type ClusterSize interface {
	// LiveNodes returns how many nodes are live, this one included; 1
	// when it cannot tell. It is called on the publish path of every
	// rate-limited subject, so it must be cheap.
	LiveNodes() int
}

// ClusterChange is one change another node made.
type ClusterChange struct {
	Kind ClusterChangeKind
	// Subject and Seq: ChangeAppended.
	Subject string
	Seq     uint64
	// ContractID: ChangeContract.
	ContractID string
	// Revoked: ChangeContract, when the Cluster read the change itself and
	// it revokes the contract; the engine then does not read the store
	// again. False: the engine reads the contract from the store, and the
	// contract is in doubt on this node while that read fails (or has not
	// answered within a second): every check of it is refused
	// STORE_UNAVAILABLE and its subscriptions pause, until a read says
	// whether the change revoked it. A Cluster that can tell should say
	// so: its revocations then take effect without a read.
	Revoked bool `json:",omitempty"`
	// RequestID, Requester (the request's principal) and Reply:
	// ChangeReply.
	RequestID string   `json:",omitempty"`
	Requester string   `json:",omitempty"`
	Reply     *Message `json:",omitempty"`
}

// ClusterChangeKind says what changed.
type ClusterChangeKind int

const (
	// ChangeAppended: a message was appended (Subject, Seq).
	ChangeAppended ClusterChangeKind = iota + 1
	// ChangeDirectory: an account, role, grant or grant revocation changed;
	// the engine reloads its access directory and every contract's next
	// check sees the new one. While the reload fails (or has run for a
	// second without an answer), the engine refuses every authorization
	// with STORE_UNAVAILABLE rather than judge it on the old directory,
	// and subscriptions deliver nothing until it succeeds.
	ChangeDirectory
	// ChangeContract: the stored contract ContractID changed (revoked).
	// Unless the change says it revokes the contract (Revoked), the engine
	// reads the contract from the store, whether or not this node has
	// loaded it, and revokes it here if it was revoked. While that read
	// fails (or has run for a second without an answer), the contract is
	// in doubt: every check of it on this node (its next publish, receive,
	// ack or renewal, and the check before each delivery of its running
	// subscriptions) is refused STORE_UNAVAILABLE rather than judged on
	// what this node held before the change, and its subscriptions
	// deliver nothing, without ending, until a read succeeds. Other
	// contracts are not affected. The watch waits for the read for at
	// most that second, then goes on with the next change while the read
	// is tried again (50 ms doubling to 5 s).
	ChangeContract
	// ChangeReply: a reply to request RequestID, for a requester that was
	// not waiting on the node that admitted it.
	ChangeReply
)

// Leaser hands out work-queue leases that hold across every node: a
// message is leased to one consumer of its group in the whole cluster at
// a time.
type Leaser interface {
	// Acquire leases seq of the group key to this node until deadline.
	Acquire(ctx context.Context, key store.GroupKey, seq uint64, deadline time.Time) (LeaseState, error)
	// Release ends this node's lease of seq at attempt (LeaseState.Attempt
	// of the Acquire that leased it): done after an ack (or a skip, or
	// exhaustion), otherwise the message may be leased again from retryAt
	// on. Only this node's own lease at attempt is ended: the engine may
	// send a release after it let go of the group's lock, and by then it
	// may hold the message again under a later attempt, which the late
	// release must leave alone. A release of a lease this node does not
	// hold at attempt (another node took it after this node's ran out,
	// and holds or settled it; this node leased it again since; or it is
	// gone) writes nothing and fails with a *Error of code
	// ACK_NOT_ALLOWED, as LeaseReturner.Return does. A done release of a
	// lease this node settled already is no change, and so is a release
	// that is not done of a lease this node released already, as early
	// or earlier. The engine settles an acknowledged message's lease so
	// before it records the message done in the group's progress, which
	// every node shares, and refuses the acknowledgement (ACK_NOT_ALLOWED,
	// audited ack.denied) when the release does, writing nothing: another
	// node may run the message. Any other error of a done release is
	// logged, and the message recorded done all the same. A release that
	// is not done and is refused leaves the lease to whoever holds it.
	Release(ctx context.Context, key store.GroupKey, seq uint64, attempt int, done bool, retryAt time.Time) error
}

// LeaseReturner is an optional interface of a Cluster's Leaser: with it,
// a lease whose message never reached a consumer (the store failed to
// record its attempt, a transport could not send it (ErrUndelivered), a
// subscription stopped before handing it over, a skip the store did not
// record) is given back uncounted, and the next lease of the message, on
// any node, is the same attempt, as on one node. Without it such a lease
// is released (Release, not done) and the next one counts one attempt
// more: a message bounced by sends that fail may be exhausted unread.
//
// A Leaser that also counts from the attempts the store recorded (the
// larger of the two, as store/jetstream does) needs the engine to lower
// that count first: before it returns a lease whose attempt the store
// recorded, it lowers the store's count from attempt to attempt-1 by
// compare-and-set (store.AttemptLowerer), while the lease is still its
// own. The store refuses when it no longer holds attempt (another node
// took the lease over and recorded its own attempt): a plain write
// landing after that node's would leave the count too low, and the
// message could be delivered more often than its attempts allow. When the
// store refuses, the write fails, the store cannot compare (no
// AttemptLowerer), or the lease's deadline has passed on this node's
// clock (another node may hold it), the engine releases the lease
// instead, its attempt spent: one attempt too many, never one too few.
type LeaseReturner interface {
	// Return gives this process's lease of seq of the group key back,
	// uncounted: only while the lease is this process's at exactly
	// attempt (not settled; held, or let go by this process and not taken
	// since), it is written, by compare-and-set, as attempt-1, released,
	// due again at retryAt, and the next Acquire of it, here or on
	// another node, counts attempt again. A lease another node holds or
	// settled, one this process settled, one at another attempt (this
	// node leased the message again meanwhile), and one that is gone are
	// left as they are, and Return fails with a *Error of code
	// ACK_NOT_ALLOWED: the engine then leaves the lease alone (its
	// attempt stays counted, or another lease holds). A Return repeated,
	// with the same attempt and retryAt, once it was written is no change
	// and returns nil. Any other error means the lease may or may not
	// have been given back; the engine logs it, and the lease runs out by
	// itself. It is safe for concurrent use, and called with the group's
	// lock held or not.
	Return(ctx context.Context, key store.GroupKey, seq uint64, attempt int, retryAt time.Time) error
}

// LeaseExtender is an optional interface of a Cluster's Leaser: with it,
// a message leased to a push subscription stays leased to this node for
// as long as its in-process handler runs, as on one node, rather than
// until the ack wait it was acquired for. The engine extends such a lease
// when a third of the ack wait is left, to one ack wait from then, and
// extends every lease of a subscription's group due within half an ack
// wait in the same call: at most two extensions of a lease per ack wait.
// A node that stops (killed, cut off from the others) stops extending:
// its leases run out at most one ack wait after its last extension. A
// lease Extend reports lost is extended no more, and its delivery is
// told: the handler's context is cancelled (ACK_NOT_ALLOWED), and its
// answer settles nothing (SubscribeOptions.LeaseLost).
type LeaseExtender interface {
	// Extend moves the deadline of this node's leases of seqs of the
	// group key to deadline. It returns the sequences whose lease this
	// node no longer holds (another node took it after it ran out, or a
	// node settled it); those are not extended. An error means some
	// leases may not have been extended; the engine calls again with
	// every sequence that is not lost.
	Extend(ctx context.Context, key store.GroupKey, seqs []uint64, deadline time.Time) (lost []uint64, err error)
}

// LeaseState is the answer of Leaser.Acquire.
type LeaseState struct {
	// Acquired: this node holds the lease; Attempt is its delivery attempt
	// (1 for the first lease of seq in the cluster).
	Acquired bool
	Attempt  int
	// Done: a node settled seq; nobody leases it again. The engine then
	// records it done in the group's progress too (no change when it is
	// there already): the node that settled the lease may have failed to
	// write the progress, or stopped before it did.
	Done bool
	// Until: when not acquired and not done, another node holds seq until
	// then.
	Until time.Time
}

// shared reports whether g's leases go through the cluster: work-queue
// groups do, pubsub pull cursors do not.
func (e *Engine) shared(g *group) bool {
	return e.opts.Cluster != nil && !strings.HasPrefix(g.key.Group, cursorPrefix)
}

// clusterBarrier waits, on a cluster whose Cluster is a ClusterBarrier,
// until every live node has applied this node's changes of access state.
// One node (or a Cluster without barrier) returns at once. The change
// stays made when the wait fails: the error says so and is retryable.
func (e *Engine) clusterBarrier(ctx context.Context) error {
	b, ok := e.opts.Cluster.(ClusterBarrier)
	if !ok {
		return nil
	}
	if err := b.Barrier(ctx); err != nil {
		return WrapError(CodeClusterUnconfirmed, err, "the change is made, but not every node confirmed it in time (%v); a node may honour the old state until it does; retry to wait again", err)
	}
	return nil
}

// watchCluster applies other nodes' changes until the engine shuts down.
// A panic of the Cluster's Watch (the application's, or a third party's)
// is a failed watch, logged: it is called again a second later. With a
// ClusterCurrent, it also keeps the engine to the moment the Cluster
// vouches for (keepCurrent).
func (e *Engine) watchCluster() {
	if cc, ok := e.opts.Cluster.(ClusterCurrent); ok {
		e.goTracked(func() { e.keepCurrent(cc) })
	}
	for e.ctx.Err() == nil {
		err := e.caught("the cluster's watch", func() error { return e.opts.Cluster.Watch(e.ctx, e.applyChange) })
		if err != nil && e.ctx.Err() == nil {
			e.opts.Logger.Warn("pigeon: cluster watch failed; retrying", "err", err)
			select {
			case <-e.ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// untilApplied runs apply until it succeeds, waiting between tries (50 ms
// doubling to 5 s), and reports whether it did; false only once the
// engine shuts down. A change another node made is applied before the
// watch goes on: the watch confirms what it was handed (ClusterBarrier),
// and a revocation read at a moment the store failed, then left, would be
// confirmed while this node still honoured what it took away. A changed
// contract is the exception: the watch goes on once it is in doubt
// (readChangedContract), refused here until the read succeeds.
func (e *Engine) untilApplied(what string, apply func() error) bool {
	wait := 50 * time.Millisecond
	for {
		err := e.caught(what, apply) // a panic of the store is a failed read
		if err == nil {
			return true
		}
		e.opts.Logger.Warn("pigeon: applying another node's change failed; retrying", "what", what, "err", err, "retryIn", wait)
		select {
		case <-e.ctx.Done():
			return false
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// directoryBehind reports that the access directory fell behind a change
// another node made (behind, with the reload's error), or caught up. While
// it is behind, every authorization that consults it is refused
// STORE_UNAVAILABLE (see directory.behind): a revocation made elsewhere
// must not wait here for as long as the store cannot be read. Live
// subscriptions are woken, so that they pause now rather than deliver on
// the old directory, and woken again once it caught up, so that each
// judges its contract on the new directory at once: it ends if the change
// took its access away, and goes on otherwise (subscription.checkDelivery).
func (e *Engine) directoryBehind(behind bool, cause error) {
	if behind {
		e.opts.Logger.Error("pigeon: the access directory is behind a change another node made and cannot be read again; every authorization on this node is refused STORE_UNAVAILABLE, and subscriptions pause, until a reload succeeds",
			"err", cause)
	} else {
		e.opts.Logger.Info("pigeon: the access directory caught up with the other nodes; authorizations resume")
	}
	e.onAccessChanged()
}

// keepCurrent makes the directory behind whenever the moment cc vouches
// for (CurrentUntil) has passed, and no longer once it vouches again,
// until the engine shuts down. It looks when that moment comes (which cc
// has meanwhile moved on, as a rule), and every currentPoll after it.
// A panic of cc counts as no vouching. It uses the system clock, as the
// Cluster does, not Options.Now. Each change wakes the live
// subscriptions, as directoryBehind does: they pause while the node is
// not vouched for, and judge their contracts again once it is.
func (e *Engine) keepCurrent(cc ClusterCurrent) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			return
		case <-t.C:
		}
		var until time.Time
		_ = e.caught("the cluster's CurrentUntil", func() error { until = cc.CurrentUntil(); return nil })
		left, changed := e.dir.heard(until)
		if changed && left <= 0 {
			e.opts.Logger.Error("pigeon: this node can no longer be sure it has heard every change the other nodes made (the cluster vouched for it until currentUntil: the shared store may be unreachable from this node, or its watch stalled); every authorization on this node is refused STORE_UNAVAILABLE, and subscriptions pause, until it has caught up",
				"currentUntil", until)
			e.onAccessChanged()
		} else if changed {
			e.opts.Logger.Info("pigeon: this node has caught up with the other nodes' changes; authorizations resume (unless a reload of the directory still fails)")
			e.onAccessChanged()
		}
		if left <= 0 {
			left = currentPoll
		}
		t.Reset(left)
	}
}

// applyChange applies c, another node's change. Watch may call it on a
// goroutine of the Cluster's own, so it survives its own panics: one
// reading the store is retried (untilApplied); any other is logged and
// the watch goes on with the next change.
func (e *Engine) applyChange(c ClusterChange) {
	defer e.survived("applying another node's change")
	switch c.Kind {
	case ChangeAppended:
		if f := e.fanoutOf(c.Subject); f != nil {
			f.appended(c.Seq)
		}
	case ChangeDirectory:
		if !e.untilApplied("reloading the access directory", func() error { return e.dir.reload(e.ctx, e.opts.Logger, e.directoryBehind) }) {
			return
		}
		e.onAccessChanged()
	case ChangeReply:
		if c.Reply != nil {
			e.replies.deliver(c.RequestID, c.Requester, c.Reply, e.now())
		}
	case ChangeContract:
		if c.Revoked {
			e.revokeAway(c.ContractID)
			return
		}
		e.readChangedContract(c.ContractID) // in doubt while it cannot be read
	}
}
