package pigeon

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// A contract is in doubt on a node of a cluster while another node has
// changed it (ChangeContract without Revoked: the change may be its
// revocation) and this node cannot read it again. From the first read
// that fails, or contractDoubtAfter into a read that has not answered,
// every check of the contract on this node is refused STORE_UNAVAILABLE
// (doubtText): its next publish, receive, ack, renewal, and the check
// before each delivery of its running subscriptions, which pause rather
// than end, as they do while the access directory is behind. The node
// keeps reading (untilApplied); the read that settles the change revokes
// the contract if it was revoked, and otherwise ends the doubt: its
// subscriptions go on from where they stood. Only that contract is
// refused; every other goes on as before.

// contractDoubtAfter is how long the watch waits for the read of a
// changed contract: a read that has not answered by then (a store
// unreachable without an error) puts the contract in doubt, and the
// watch goes on with the next change while the read goes on. It is the
// directory's bound (directoryStaleAfter), for the same reason: well
// within the time after which a ClusterBarrier passes over a node that
// does not confirm.
const contractDoubtAfter = directoryStaleAfter

// doubtText is the reason of a check refused because its contract is in
// doubt.
const doubtText = "another node changed this contract and this node cannot read it again yet (the change may revoke it); retry later or on another node"

// contractDoubts holds, by contract id, the changes other nodes made to
// contracts that this node is reading.
type contractDoubts struct {
	held atomic.Int64 // how many changes of m are in doubt: the checks' fast path
	mu   sync.Mutex
	m    map[string]*contractChange
}

// contractChange is the reading of the changes other nodes made to one
// contract, from the first one told until a read that began after the
// last one told succeeds.
type contractChange struct {
	told    uint64        // changes told so far
	doubt   bool          // a read failed, or has not answered: checks are refused
	settled chan struct{} // closed once the changes are settled
}

// tell records a change of contract id and returns its reading; start
// reports that it is new, and that nothing reads it yet.
func (d *contractDoubts) tell(id string) (ch *contractChange, start bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch = d.m[id]; ch != nil {
		ch.told++
		return ch, false
	}
	if d.m == nil {
		d.m = map[string]*contractChange{}
	}
	ch = &contractChange{told: 1, settled: make(chan struct{})}
	d.m[id] = ch
	return ch, true
}

// toldOf returns how many changes ch has been told.
func (d *contractDoubts) toldOf(ch *contractChange) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return ch.told
}

// distrust puts ch, the reading of contract id, in doubt, unless it is
// settled; it reports whether that changed anything.
func (d *contractDoubts) distrust(id string, ch *contractChange) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[id] != ch || ch.doubt {
		return false
	}
	ch.doubt = true
	d.held.Add(1)
	return true
}

// settle ends ch, the reading of contract id, after a read that began
// when it had been told told changes succeeded: when no change was told
// since, or, final, whatever was told since (the contract is revoked, and
// no change undoes that). It reports whether ch is settled (now or
// before), and whether this call took it out of doubt.
func (d *contractDoubts) settle(id string, ch *contractChange, told uint64, final bool) (settled, wasDoubt bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m[id] != ch {
		return true, false
	}
	if !final && ch.told != told {
		return false, false // changed again while it was read: read again
	}
	delete(d.m, id)
	if ch.doubt {
		d.held.Add(-1)
	}
	close(ch.settled)
	return true, ch.doubt
}

// holds reports whether contract id is in doubt. It costs one atomic
// load while no contract is.
func (d *contractDoubts) holds(id string) bool {
	if d.held.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := d.m[id]
	return ch != nil && ch.doubt
}

// contractInDoubt reports whether contract id is in doubt on this node:
// another node changed it, and this node could not read it since. Every
// check of the contract refuses it meanwhile, with CodeStoreUnavailable
// and doubtText, after the checks that say it is unknown, held by
// another or revoked.
func (e *Engine) contractInDoubt(id string) bool { return e.live.doubt.holds(id) }

// readChangedContract applies another node's change of contract id, told
// without what it is: it reads the contract (readUntilSettled, on a
// goroutine of its own, one per contract) and waits until the read
// settles the change, or for contractDoubtAfter, or until the engine
// shuts down. A read that fails puts the contract in doubt at once; one
// that has not answered by then does when the wait ends. Either way the
// watch goes on with the contract refused, rather than wait for the store
// with the changes after it (other contracts revoked, say) untold: the
// change a ClusterBarrier is confirmed for is in force here, as a
// refusal, until a read says what it is.
//
// A contract this node has not loaded is read too: a load that read the
// store before the change would otherwise cache it as it was. A read
// that finds it revoked notes it as revoked elsewhere (noteRevokedAway),
// and one that fails puts its id in doubt, which the checks of a load
// that lands meanwhile consult.
func (e *Engine) readChangedContract(id string) {
	ch, start := e.live.doubt.tell(id)
	if start {
		e.goTracked(func() { e.readUntilSettled(id, ch) })
	}
	t := time.NewTimer(contractDoubtAfter)
	defer t.Stop()
	select {
	case <-ch.settled:
	case <-e.ctx.Done():
	case <-t.C:
		e.doubtContract(id, ch, NewError(CodeStoreUnavailable, "reading the contract has taken over %s", contractDoubtAfter))
	}
}

// readUntilSettled reads contract id until a read that began after the
// last change told of it succeeds, or the engine shuts down (the
// contract then stays in doubt, if it is). A read that fails or panics
// puts the contract in doubt and is tried again (untilApplied).
func (e *Engine) readUntilSettled(id string, ch *contractChange) {
	e.untilApplied("reading a changed contract", func() error {
		err := e.caught("reading a changed contract", func() error { return e.settleChange(id, ch) })
		if err != nil {
			e.doubtContract(id, ch, err)
		}
		return err
	})
}

// settleChange reads contract id and applies what it finds, until a read
// that began after the last change told of it settles ch. A contract
// revoked here meanwhile (by its holder, or by a change that said so)
// needs no read: its revocation is final.
func (e *Engine) settleChange(id string, ch *contractChange) error {
	for {
		told := e.live.doubt.toldOf(ch)
		if e.knownRevoked(id) {
			e.endDoubt(id, ch, told, true)
			return nil
		}
		rec, err := e.store.GetContract(e.ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			rec, err = store.ContractRecord{}, nil // gone: nothing to revoke
		}
		if err != nil {
			return err
		}
		if rec.Revoked {
			e.revokeAway(id)
		}
		if e.endDoubt(id, ch, told, rec.Revoked) {
			return nil
		}
	}
}

// doubtContract puts ch, the reading of contract id, in doubt (cause: why
// it could not be read), logs it, and wakes the contract's subscriptions,
// so that they pause now.
func (e *Engine) doubtContract(id string, ch *contractChange, cause error) {
	if !e.live.doubt.distrust(id, ch) {
		return
	}
	e.opts.Logger.Error("pigeon: another node changed a contract and this node cannot read it again; every check of the contract on this node is refused STORE_UNAVAILABLE, and its subscriptions pause, until a read succeeds",
		"contract", id, "err", cause)
	e.pokeContract(id)
}

// endDoubt settles ch (see contractDoubts.settle) and reports whether it
// is. A contract it takes out of doubt unrevoked is honoured again: its
// subscriptions are woken, so that they go on at once.
func (e *Engine) endDoubt(id string, ch *contractChange, told uint64, revoked bool) bool {
	settled, wasDoubt := e.live.doubt.settle(id, ch, told, revoked)
	if wasDoubt {
		e.opts.Logger.Info("pigeon: a contract another node changed was read again; its checks resume, unless it is revoked",
			"contract", id, "revoked", revoked)
		if !revoked {
			e.pokeContract(id)
		}
	}
	return settled
}

// knownRevoked reports whether this node holds contract id revoked: the
// contract is loaded revoked, or, not loaded, another node revoked it a
// moment ago (contracts.revokedAway).
func (e *Engine) knownRevoked(id string) bool {
	e.contracts.mu.RLock()
	defer e.contracts.mu.RUnlock()
	if c := e.contracts.m[id]; c != nil {
		return c.revoked.Load()
	}
	_, away := e.contracts.revokedAway[id]
	return away
}

// revokeAway applies another node's revocation of contract id: a
// contract this node has loaded is revoked (it stops counting, and its
// subscriptions stop); one it has not is noted (noteRevokedAway), so that
// a load that read the store before the revocation caches it revoked.
func (e *Engine) revokeAway(id string) {
	e.contracts.mu.Lock()
	cached := e.contracts.m[id]
	if cached == nil {
		e.contracts.noteRevokedAway(id, time.Now())
	}
	e.contracts.mu.Unlock()
	if cached != nil {
		cached.revokeStored.Store(true) // by the node that revoked it
	}
	if cached == nil || cached.revoked.Swap(true) {
		return
	}
	e.live.release(cached.info.Principal, id)
	e.onContractRevoked(id)
}

// pokeContract wakes the running subscriptions of contract id, so that
// they check it again now.
func (e *Engine) pokeContract(id string) {
	for _, s := range e.subscriptionsOf(id) {
		s.poke()
	}
}
