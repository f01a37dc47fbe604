package programs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
)

// AuthProgram is the authentication method of a program's principal, as
// its contracts record it.
const AuthProgram pigeon.AuthMethod = "program"

// binding is a program's subscription to its route under one contract.
// Its current version can be swapped while it runs: each delivery runs on
// the version current when it starts.
type binding struct {
	mg      *Manager
	name    string
	cur     atomic.Pointer[version]
	caller  pigeon.Caller
	exp     atomic.Pointer[time.Time] // when caller's contract expires
	sub     pigeon.Subscription
	h       pigeon.Handler // handle in the Manager's middleware
	stopped atomic.Bool
	// tr follows the binding's position on a pubsub route (nil on other
	// subjects), where a binding that replaces it resumes and a restart
	// resumes once it is stored.
	tr *tracker

	saveMu   sync.Mutex
	live     bool   // b is its program's binding: its position is stored
	savedGen uint64 // the tracker's generation last stored
}

// deliver is the binding's pigeon.AsyncHandler. It is called in sequence
// order (the tracker notes each message as it is handed over) and runs the
// program on its own goroutine; a message the binding's predecessor
// handled already is acknowledged at once.
func (b *binding) deliver(ctx context.Context, d *pigeon.Delivery, done func(error)) {
	if b.tr != nil && b.tr.begin(d.Message.Sequence, d.Attempt) {
		done(nil)
		return
	}
	go func() {
		err := b.call(ctx, d)
		if b.tr != nil {
			b.tr.end(ctx, d.Message.Sequence, d.Attempt, err)
		}
		done(err)
	}()
}

// call runs the wrapped handler once, recovering a panic (of a middleware)
// as a failure. The middleware gets its own copy of the message.
func (b *binding) call(ctx context.Context, d *pigeon.Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("programs: handler panicked: %v", p)
		}
	}()
	if len(b.mg.opts.Middleware) > 0 {
		d = &pigeon.Delivery{Subject: d.Subject, Message: d.Message.Clone(), Attempt: d.Attempt, Session: d.Session}
	}
	return b.h(ctx, d)
}

// handle runs one delivery on the current version.
func (b *binding) handle(ctx context.Context, d *pigeon.Delivery) error {
	for {
		v := b.cur.Load()
		if !v.acquire() {
			if b.cur.Load() != v {
				continue // swapped: the successor is already current
			}
			return pigeon.ErrUndelivered // stopped: the message goes back at once
		}
		// A delivery that started finishes (within the program's time
		// limit) even when the subscription stops meanwhile: a program is
		// never cut short halfway through its effects by a swap or a stop.
		err := v.deliver(context.WithoutCancel(ctx), b.caller, d)
		v.release()
		return err
	}
}

// bind negotiates a contract for v's account and subscribes v's route
// under it (see subscribe).
func (mg *Manager) bind(ctx context.Context, p *program, v *version, from *position) (*binding, error) {
	caller, exp, err := mg.negotiate(ctx, &v.man)
	if err != nil {
		return nil, err
	}
	return mg.subscribe(ctx, p, v, caller, exp, from)
}

// negotiate reads man's account and negotiates a contract for it: the
// caller under it, and when it expires.
func (mg *Manager) negotiate(ctx context.Context, man *Manifest) (pigeon.Caller, time.Time, error) {
	acct, err := mg.e.GetAccount(ctx, man.Account)
	if err != nil {
		return pigeon.Caller{}, time.Time{}, err
	}
	// The principal carries no roles of its own: the engine adds the
	// account's, as they are at each check. Roles set here would be taken
	// for roles its credential carries, which the account losing them
	// (or being deleted) never takes away: the contract would keep them,
	// and renew them, for as long as the program runs.
	pr := &pigeon.Principal{ID: acct.ID, Attributes: acct.Attributes, Method: AuthProgram}
	k, err := mg.e.Negotiate(ctx, pr, "", man.subjects(), 0)
	if err != nil {
		return pigeon.Caller{}, time.Time{}, err
	}
	mg.lin.contract(k.ID())
	return pigeon.Caller{Principal: pr, Region: k.Info().Region, ContractID: k.ID()}, k.ExpiresAt(), nil
}

// subscribe subscribes v's route under caller's contract (revoked when
// that fails). On a pubsub subject the binding starts after from when it
// is a position on that subject, else after the last message stored: it
// always starts at a known sequence, which it stores as its position once
// it is live.
func (mg *Manager) subscribe(ctx context.Context, p *program, v *version, caller pigeon.Caller, exp time.Time, from *position) (*binding, error) {
	man := &v.man
	b := &binding{mg: mg, name: p.name, caller: caller}
	b.exp.Store(&exp)
	b.cur.Store(v)
	b.h = b.handle
	for i := len(mg.opts.Middleware) - 1; i >= 0; i-- {
		b.h = mg.opts.Middleware[i](b.h)
	}
	opts := []pigeon.SubscribeOption{pigeon.WithSelector(man.Route.Selector), pigeon.WithFilter(man.Route.Filter),
		pigeon.WithGroup(man.Route.Group), pigeon.WithMaxInFlight(man.Route.MaxInFlight)}
	fail := func(err error) (*binding, error) {
		_ = mg.e.RevokeContract(ctx, caller.Principal, caller.ContractID)
		return nil, err
	}
	if sp, err := mg.e.Subject(man.Route.Subject); err == nil && sp.Mode == pigeon.ModePubSub {
		start := position{Subject: sp.Name}
		if from != nil && from.Subject == sp.Name {
			start = *from
		} else if _, start.Seq, err = mg.e.Bounds(ctx, sp.Name); err != nil {
			return fail(err)
		}
		maxAtt := sp.Delivery.Retry.MaxAttempts
		if maxAtt <= 0 {
			maxAtt = pigeon.DefaultMaxAttempts
		}
		b.tr = newTracker(sp.Name, maxAtt, start)
		opts = append(opts, pigeon.WithStart(pigeon.StartAt(start.Seq+1)))
	}
	var err error
	if b.sub, err = mg.e.SubscribeAsync(ctx, caller, man.Route.Subject, b.deliver, opts...); err != nil {
		return fail(err)
	}
	mg.wg.Add(1)
	go mg.watch(p, b)
	return b, nil
}

// from is where a binding that replaces b starts: b's position with every
// message handled above it (nil when b is not on a pubsub subject).
func (b *binding) from() *position {
	if b.tr == nil {
		return nil
	}
	p, _ := b.tr.position(-1)
	return &p
}

// halt ends the subscription, waiting for the deliveries in flight, and
// stores its position a last time; the version stays.
func (b *binding) halt(ctx context.Context) {
	b.stopped.Store(true)
	_ = b.sub.Unsubscribe(ctx)
	b.setLive(ctx, false)
}

// stop halts b and retires its current version.
func (b *binding) stop(ctx context.Context) {
	b.halt(ctx)
	b.cur.Load().retire(ctx)
}

// revoke revokes b's contract once b is stopped and replaced (or its
// program removed): nothing holds it any more, and it would otherwise
// stay live, usable and counted among its account's contracts, until it
// expires.
func (b *binding) revoke(ctx context.Context) {
	err := b.mg.e.RevokeContract(context.WithoutCancel(ctx), b.caller.Principal, b.caller.ContractID)
	if err != nil && pigeon.ErrorCode(err) != pigeon.CodeContractNotFound { // expired and swept: nothing left
		b.mg.log.Warn("program binding's contract not revoked", "program", b.name, "contract", b.caller.ContractID, "error", err)
	}
}

// accountGone reports whether the account caller runs as was deleted,
// and then revokes caller's contract (settle: waiting while ctx lasts,
// revoked reports whether it was), which ends its binding: the
// binding's watch binds the program again, which fails (audited) until
// an account of that id exists again. A program's principal is its
// account: the engine takes away the roles of a deleted account, but a
// catalog rule naming the account's id would go on allowing a contract
// negotiated for it, renewed in place, for as long as the program runs.
func accountGone(ctx context.Context, e *pigeon.Engine, wg *sync.WaitGroup, caller pigeon.Caller) (gone, revoked bool) {
	if _, err := e.GetAccount(ctx, caller.Principal.ID); pigeon.ErrorCode(err) != pigeon.CodeNotFound {
		return false, false
	}
	revoked = settle(ctx, wg, func(ctx context.Context) {
		_ = e.RevokeContract(ctx, caller.Principal, caller.ContractID)
	})
	return true, revoked
}

// watch stores b's position every Options.PositionInterval while it
// changes, and renews b's contract in place shortly before it expires, as
// sessions do (renew), so the binding goes on under one contract. When
// the subscription stops for a reason other than stop or shutdown (the
// contract was revoked, a role of the account was removed, a renewal was
// refused and the contract ran out), it binds the program again: the
// account is read again and a new contract negotiated, retrying with a
// growing delay while that fails. The new binding resumes at b's
// position.
func (mg *Manager) watch(p *program, b *binding) {
	defer mg.wg.Done()
	var tick <-chan time.Time
	if b.tr != nil {
		t := time.NewTicker(mg.opts.PositionInterval)
		defer t.Stop()
		tick = t.C
	}
	renew := time.NewTimer(renewIn(*b.exp.Load(), 0))
	defer renew.Stop()
wait:
	for {
		select {
		case <-b.sub.Done():
			break wait
		case <-mg.ctx.Done():
			return
		case <-tick:
			b.persist(mg.ctx, false)
		case <-renew.C:
			renew.Reset(mg.renew(b))
		}
	}
	b.persist(mg.ctx, false)
	delay := mg.opts.RebindDelay
	for {
		if b.stopped.Load() || mg.ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if p.b != b {
			p.mu.Unlock()
			return
		}
		nb, err := mg.bind(mg.ctx, p, b.cur.Load(), b.from())
		if err == nil {
			p.b = nb
			p.snapshot()
			b.setLive(mg.ctx, false)
			nb.setLive(mg.ctx, true)
			b.revoke(mg.ctx)
		}
		p.mu.Unlock()
		if err == nil {
			mg.audit(mg.ctx, pigeon.EventProgramBound, pigeon.CodeOK, nb.caller, b.cur.Load())
			return
		}
		if pigeon.ErrorCode(err) == pigeon.CodeShutdown {
			return
		}
		mg.log.Warn("program binding could not be renewed", "program", p.name, "error", err)
		mg.audit(mg.ctx, pigeon.EventProgramFailed, pigeon.ErrorCode(err), b.caller, b.cur.Load())
		if !mg.sleep(delay) {
			return
		}
		delay = min(2*delay, maxRebindDelay)
	}
}

// renew moves b's contract's expiry later (pigeon.Engine.RenewContract)
// and returns how long to wait before the next renewal. A renewal is
// tried pigeon.RenewLead ahead of the expiry, and again every so often
// while it fails for a reason that may pass; a refusal that will not pass
// (revoked, a role taken away, the subject's policy changed) leaves the
// contract to run out, and the binding's end binds the program again.
func (mg *Manager) renew(b *binding) time.Duration {
	exp := *b.exp.Load()
	if !time.Now().Before(exp) || b.stopped.Load() {
		return time.Hour // ended: the subscription's end rebinds it
	}
	if gone, _ := accountGone(mg.ctx, mg.e, &mg.wg, b.caller); gone {
		return time.Hour // revoked: the subscription's end rebinds it
	}
	ctx, cancel := context.WithTimeout(mg.ctx, renewTimeout)
	k, err := mg.e.RenewContract(ctx, b.caller.Principal, b.caller.ContractID, 0)
	cancel()
	switch {
	case err == nil && k.ExpiresAt().After(exp):
		exp = k.ExpiresAt()
		b.exp.Store(&exp)
		return renewIn(exp, 0)
	case err == nil:
		return time.Hour // as far as it goes: it runs out, then rebinds
	case pigeon.RenewalFinal(err) || pigeon.ErrorCode(err) == pigeon.CodeShutdown:
		mg.log.Info("program binding's contract not renewed; it will be bound again when it ends", "program", b.name, "error", err)
		return time.Hour
	default:
		mg.log.Warn("program binding's contract could not be renewed; trying again", "program", b.name, "error", err)
		return renewIn(exp, pigeon.RenewRetry(time.Until(exp)))
	}
}

// renewTimeout bounds one renewal of a binding's contract.
const renewTimeout = 10 * time.Second

// renewIn is how long to wait before renewing a contract that expires at
// exp: retry when it is set, else until pigeon.RenewLead ahead of exp; at
// most until exp.
func renewIn(exp time.Time, retry time.Duration) time.Duration {
	left := time.Until(exp)
	if left <= 0 {
		return time.Hour
	}
	return pigeon.RenewDelay(left, retry)
}

// handover binds v in old's place on the same pubsub subject, exactly:
// old's subscription stops (its deliveries in flight finish), then v's
// starts after old's position and acknowledges without running what old
// handled above it, so no message is handled by both or by neither. On
// failure old's version is bound again at the same place.
func (mg *Manager) handover(ctx context.Context, p *program, old *binding, v *version) (*binding, error) {
	caller, exp, err := mg.negotiate(ctx, &v.man)
	if err != nil {
		return nil, err
	}
	old.halt(ctx)
	nb, err := mg.subscribe(ctx, p, v, caller, exp, old.from())
	if err != nil {
		mg.resume(ctx, p, old, old.from())
		return nil, err
	}
	return nb, nil
}

// resume binds the version of old again at from, under its contract,
// after a handover failed; when even that fails the program is left
// unbound, with its error.
func (mg *Manager) resume(ctx context.Context, p *program, old *binding, from *position) {
	v := old.cur.Load()
	b, err := mg.subscribe(ctx, p, v, old.caller, *old.exp.Load(), from)
	if err != nil {
		v.retire(ctx)
		p.b, p.err = nil, "the running version could not be bound again: "+err.Error()
		mg.log.Error("program not bound again", "program", p.name, "error", err)
		mg.audit(ctx, pigeon.EventProgramFailed, pigeon.ErrorCode(err), old.caller, v)
		return
	}
	p.b = b
	b.setLive(ctx, true)
}
