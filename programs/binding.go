package programs

import (
	"context"
	"sync/atomic"

	"pigeon"
)

// AuthProgram is the authentication method of a program's principal, as
// its contracts record it.
const AuthProgram pigeon.AuthMethod = "program"

// binding is a program's subscription to its route under one contract.
// Its current version can be swapped while it runs: each delivery runs on
// the version current when it starts.
type binding struct {
	cur     atomic.Pointer[version]
	caller  pigeon.Caller
	sub     pigeon.Subscription
	stopped atomic.Bool
	// lastSeq is the highest sequence handled, where a binding that must
	// be renewed (its contract expired) resumes a pubsub route.
	lastSeq atomic.Uint64
}

// handle is the binding's pigeon.Handler.
func (b *binding) handle(ctx context.Context, d *pigeon.Delivery) error {
	for {
		v := b.cur.Load()
		if !v.acquire() {
			if b.cur.Load() != v {
				continue // swapped: the successor is already current
			}
			return pigeon.ErrUndelivered // stopped: the message goes back at once
		}
		err := v.deliver(ctx, b.caller, d)
		v.release()
		if err == nil {
			for seq := d.Message.Sequence; ; {
				last := b.lastSeq.Load()
				if seq <= last || b.lastSeq.CompareAndSwap(last, seq) {
					break
				}
			}
		}
		return err
	}
}

// bind negotiates a contract for v's account and subscribes v's route
// under it; a pubsub route starts at sequence from when it is not 0.
func (mg *Manager) bind(ctx context.Context, p *program, v *version, from uint64) (*binding, error) {
	man := &v.man
	acct, err := mg.e.GetAccount(ctx, man.Account)
	if err != nil {
		return nil, err
	}
	pr := &pigeon.Principal{ID: acct.ID, Attributes: acct.Attributes, Roles: acct.Roles, Method: AuthProgram}
	k, err := mg.e.Negotiate(ctx, pr, "", man.subjects(), 0)
	if err != nil {
		return nil, err
	}
	b := &binding{caller: pigeon.Caller{Principal: pr, Region: k.Info().Region, ContractID: k.ID()}}
	b.cur.Store(v)
	b.lastSeq.Store(from)
	opts := []pigeon.SubscribeOption{pigeon.WithSelector(man.Route.Selector), pigeon.WithFilter(man.Route.Filter),
		pigeon.WithGroup(man.Route.Group), pigeon.WithMaxInFlight(man.Route.MaxInFlight), pigeon.WithMiddleware(mg.opts.Middleware...)}
	if sp, err := mg.e.Subject(man.Route.Subject); err == nil && sp.Mode == pigeon.ModePubSub && from > 0 {
		opts = append(opts, pigeon.WithStart(pigeon.StartAt(from+1)))
	}
	if b.sub, err = mg.e.Subscribe(ctx, b.caller, man.Route.Subject, b.handle, opts...); err != nil {
		_ = mg.e.RevokeContract(ctx, pr, k.ID())
		return nil, err
	}
	mg.wg.Add(1)
	go mg.watch(p, b)
	return b, nil
}

// stop ends the subscription (waiting for the deliveries in flight) and
// retires the current version.
func (b *binding) stop(ctx context.Context) {
	b.stopped.Store(true)
	_ = b.sub.Unsubscribe(ctx)
	b.cur.Load().retire(ctx)
}

// watch renews b when its subscription stops for a reason other than
// stop or shutdown (its contract expired, a role of the account was
// removed): the account is read again and a new contract negotiated,
// retrying with a growing delay while that fails.
func (mg *Manager) watch(p *program, b *binding) {
	defer mg.wg.Done()
	select {
	case <-b.sub.Done():
	case <-mg.ctx.Done():
		return
	}
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
		nb, err := mg.bind(mg.ctx, p, b.cur.Load(), b.lastSeq.Load())
		if err == nil {
			p.b = nb
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
