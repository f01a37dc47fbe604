package natsbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
)

// Headers the bridge sets on what an Out route publishes; an In route
// reads HeaderMsgID and HeaderBridge.
const (
	// HeaderMsgID is the Pigeon message id, so that a JetStream stream
	// de-duplicates a redelivery (nats.MsgIdHdr).
	HeaderMsgID = nats.MsgIdHdr
	// HeaderSubject is the Pigeon subject of the message.
	HeaderSubject = "Pigeon-Subject"
	// HeaderSequence is the message's sequence on its Pigeon subject.
	HeaderSequence = "Pigeon-Sequence"
	// HeaderBridge is the name of the Out route that published it.
	HeaderBridge = "Pigeon-Bridge"
	// HeaderResume, on what a JetStream Out route with one delivery in
	// flight publishes, is the sequence a bridge that starts resumes at
	// once the stream holds the message: the lowest of a delivery that
	// failed and waits to be tried again, or the one after the message's.
	HeaderResume = "Pigeon-Resume"
)

// ErrNATSClosed is the error of a bridge whose NATS connection was closed
// for good: it cannot go on, and Run returns it.
var ErrNATSClosed = errors.New("natsbridge: the NATS connection is closed")

// Bridge carries messages between Pigeon and NATS along its routes, under
// the contract the broker negotiates for its credential. It is safe for
// concurrent use.
type Bridge struct {
	opts   Options
	log    *slog.Logger
	routes []runner
	outs   map[string]bool // the names of the Out routes, for loop prevention

	mu        sync.Mutex
	closed    bool
	stop      chan struct{} // closed by Shutdown
	done      chan struct{} // closed when Run returns; nil before Run
	err       error
	connected bool
	principal string
	contract  string
	sessions  atomic.Uint64

	wg sync.WaitGroup

	// skipAck, set by tests, is asked before an In route acknowledges a
	// JetStream message the broker accepted: true leaves it unacknowledged,
	// as a bridge that crashed at that point would.
	skipAck func(route, id string) bool
	// beforeOut, set by tests, runs when an Out route was handed a
	// delivery, before it publishes it to NATS.
	beforeOut func(ctx context.Context, route, id string)
	// betweenCore, set by tests, runs when a core NATS Out route has
	// published a message, before it flushes.
	betweenCore func(route string)
	// beforeCore, set by tests, runs before a core NATS In route handles
	// a message.
	beforeCore func(route string)
	// beforeJetStream, set by tests, runs before a JetStream In route
	// handles a message.
	beforeJetStream func(route string)
}

// runner is one route's behaviour on a session.
type runner interface {
	route() *Route
	counters() *counters
	// start begins carrying messages on g; what it starts ends with g.
	start(g *generation) error
}

// New checks opts and returns a bridge that Run starts. An invalid option
// is an *pigeon.Error with code INVALID_ARGUMENT that names the route and
// the field.
func New(opts Options) (*Bridge, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	b := &Bridge{opts: o, log: o.Logger, outs: map[string]bool{}, stop: make(chan struct{})}
	for i := range b.opts.Routes {
		r := &b.opts.Routes[i]
		if r.Direction == Out {
			b.outs[r.Name] = true
			b.routes = append(b.routes, &outRoute{b: b, r: r})
		} else {
			b.routes = append(b.routes, &inRoute{b: b, r: r})
		}
	}
	return b, nil
}

// Run dials the broker and carries messages until ctx ends, Shutdown is
// called (it then returns nil) or a fatal error, which it returns: the
// bridge's contract or grant revoked, its credential refused, a route the
// contract does not permit or the NATS side cannot serve (a missing
// stream), the NATS connection closed. The first dial must succeed, so
// that a misconfiguration is reported at once; after that a lost session
// or an expired contract is dialed again with backoff, and the routes
// resume. Run may be called once.
func (b *Bridge) Run(ctx context.Context) error {
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return pigeon.NewError(pigeon.CodeShutdown, "natsbridge: the bridge is shut down")
	case b.done != nil:
		b.mu.Unlock()
		return pigeon.NewError(pigeon.CodeConflict, "natsbridge: Run was called already")
	}
	b.done = make(chan struct{})
	b.mu.Unlock()
	defer close(b.done)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.goTracked(func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	})
	err := b.run(ctx)
	cancel()
	b.wg.Wait()
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
	return err
}

// Shutdown stops Run and waits for it to return, or for ctx (returning
// ctx.Err()). It is idempotent; after it Run refuses to start.
func (b *Bridge) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	done := b.done
	b.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns a snapshot of the bridge and its routes.
func (b *Bridge) Stats() Stats {
	b.mu.Lock()
	s := Stats{Connected: b.connected, Principal: b.principal, ContractID: b.contract, Err: b.err, Sessions: b.sessions.Load()}
	b.mu.Unlock()
	for _, rt := range b.routes {
		s.Routes = append(s.Routes, rt.counters().snapshot(rt.route()))
	}
	return s
}

// goTracked runs fn on a goroutine Run waits for.
func (b *Bridge) goTracked(fn func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
}

// warnReconnectBuffer is what Run logs for a caller's connection that
// keeps what is published while it reconnects (see Options.NATS).
const warnReconnectBuffer = "natsbridge: the NATS connection keeps what is published while it reconnects and sends it later, after the broker was told the publish failed; connect it with natsbridge.ConnectOptions (nats.ReconnectBufSize(-1))"

// run is Run's loop: one generation per session.
func (b *Bridge) run(ctx context.Context) error {
	nc := b.opts.NATS
	if nc == nil {
		var err error
		nc, err = nats.Connect(b.opts.URL, ConnectOptions()...)
		if err != nil {
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				err = errors.New("the URL does not parse") // its text quotes the URL, password and all
			}
			return fmt.Errorf("natsbridge: cannot connect to NATS at %s: %w", RedactURL(b.opts.URL), err)
		}
		defer nc.Close()
	} else if nc.Opts.ReconnectBufSize >= 0 {
		b.log.Warn(warnReconnectBuffer)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	viol := watchViolations(nc, b.opts.Routes)
	defer viol.restore()
	attempt := 0
	for first := true; ; first = false {
		if nc.IsClosed() {
			return ErrNATSClosed
		}
		sess, err := b.dial(ctx)
		if err == nil {
			b.sessions.Add(1)
			began := time.Now()
			err = b.serve(ctx, &generation{sess: sess, deep: deepPublisher(sess, b.log), nc: nc, js: js, viol: viol})
			if time.Since(began) > b.opts.MaxReconnectDelay {
				attempt = 0
			}
		} else if first && ctx.Err() == nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRenew) {
			b.log.Info("natsbridge: renewing the contract before it expires")
			continue
		}
		if v := judge(err); v != retry && v != renew {
			b.log.Error("natsbridge: stopped", "code", pigeon.ErrorCode(err), "err", err)
			return err
		}
		attempt++
		d := backoff(attempt, b.opts.MaxReconnectDelay)
		b.log.Warn("natsbridge: the session failed; dialing again", "code", pigeon.ErrorCode(err), "err", err, "in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil
		}
	}
}

// dial opens a session for the routes' subjects.
func (b *Bridge) dial(ctx context.Context) (pigeon.Session, error) {
	var subjects []string
	for _, rt := range b.routes {
		subjects = append(subjects, rt.route().Subject)
	}
	slices.Sort(subjects)
	ctx, cancel := context.WithTimeout(ctx, b.opts.PublishTimeout)
	defer cancel()
	return b.opts.Dialer.Dial(ctx, b.opts.Credential, slices.Compact(subjects))
}

// errRenew ends a generation whose contract is about to expire.
var errRenew = errors.New("natsbridge: the contract is renewed")

// serve runs every route on g's session until ctx ends or the generation
// fails, then stops them and closes the session.
func (b *Bridge) serve(ctx context.Context, g *generation) error {
	g.ctx, g.cancel = context.WithCancel(ctx)
	g.failed = make(chan struct{})
	defer b.teardown(g)
	k := g.sess.Contract()
	for _, rt := range b.routes {
		r := rt.route()
		op := pigeon.OpPublish
		if r.Direction == Out {
			op = pigeon.OpReceive
		}
		if !k.Allows(r.Subject, op) {
			err := pigeon.NewError(pigeon.CodeOperationNotInContract, "route %q: the bridge's contract does not grant %s on %q", r.Name, op, r.Subject)
			rt.counters().stop(err)
			return err
		}
	}
	for _, rt := range b.routes {
		if err := rt.start(g); err != nil {
			err = routeError(rt.route(), err)
			if v := judge(err); v != retry && v != renew {
				rt.counters().stop(err)
			}
			return err
		}
		rt.counters().running.Store(true)
	}
	b.mu.Lock()
	b.connected, b.principal, b.contract = true, k.Principal(), k.ID()
	b.mu.Unlock()
	b.log.Info("natsbridge: session up", "principal", k.Principal(), "contract", k.ID(), "expires", k.ExpiresAt())

	var lost <-chan struct{}
	if d, ok := g.sess.(interface{ Done() <-chan struct{} }); ok {
		lost = d.Done() // transport/ws: the connection ended
	}
	// The session renews its contract in place by itself (unless dialed
	// with pigeon.WithoutAutoRenew), pigeon.RenewLead ahead of its expiry,
	// and tries again while that fails; when half of that lead is left and
	// it was not renewed, the bridge starts a new session instead.
	var (
		renewC <-chan time.Time
		renewT *time.Timer
		exp    = k.ExpiresAt()
	)
	if d := untilFallback(exp); !exp.IsZero() && d >= time.Second {
		renewT = time.NewTimer(d)
		defer renewT.Stop()
		renewC = renewT.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-g.failed:
			return g.err
		case <-lost:
			return pigeon.NewError(pigeon.CodeSessionClosed, "natsbridge: the connection to the broker was lost")
		case <-renewC:
			if now := g.sess.Contract().ExpiresAt(); now.After(exp) {
				exp = now // renewed in place: watch the new expiry
				renewT.Reset(max(untilFallback(exp), time.Second))
				continue
			}
			return errRenew
		case <-tick.C:
			if g.nc.IsClosed() {
				return ErrNATSClosed
			}
		}
	}
}

// untilFallback is how long from now the bridge waits before it checks
// that a contract expiring at exp was renewed: until half the session's
// lead (pigeon.RenewLead) is left, so the session's own renewal, and a
// retry or two of it, come first.
func untilFallback(exp time.Time) time.Duration {
	left := time.Until(exp)
	return left - pigeon.RenewLead(left)/2
}

// teardown stops g's routes and closes its session.
func (b *Bridge) teardown(g *generation) {
	b.mu.Lock()
	b.connected = false
	b.mu.Unlock()
	for _, rt := range b.routes {
		rt.counters().running.Store(false)
	}
	g.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.PublishTimeout)
	defer cancel()
	for i := len(g.stops) - 1; i >= 0; i-- {
		g.stops[i](ctx)
	}
	g.wg.Wait()
	if err := g.sess.Close(ctx); err != nil {
		b.log.Debug("natsbridge: closing the session", "err", err)
	}
}

// generation is one session and what the routes run on it.
type generation struct {
	sess pigeon.Session
	deep deepPublish // nil: the session publishes at depth 0 alone
	nc   *nats.Conn
	js   jetstream.JetStream
	viol *violations // nil without core Out routes

	ctx    context.Context // ends with the generation
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stops  []func(context.Context) // run in reverse order at teardown

	once   sync.Once
	failed chan struct{}
	err    error
}

// fail ends the generation with err (the first error wins).
func (g *generation) fail(err error) {
	g.once.Do(func() {
		g.err = err
		close(g.failed)
	})
}

// goTracked runs fn on a goroutine the teardown waits for.
func (g *generation) goTracked(fn func()) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		fn()
	}()
}

// onStop registers fn to run at teardown, after the generation's context
// ended and before its goroutines are waited for.
func (g *generation) onStop(fn func(context.Context)) { g.stops = append(g.stops, fn) }

// backoff is the jittered wait before dial number n (from 1): from 100 ms,
// doubling up to max, then a random point in its upper half.
func backoff(n int, max time.Duration) time.Duration {
	d := minReconnectDelay
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}

// RedactURL returns s, a URL or a comma-separated list of them (as
// nats.Connect takes), without what each names before its host: a NATS
// URL carries a user and password, or a token, there
// (nats://user:pass@host, nats://token@host), and errors and logs must not
// show them. Everything before the last '@' goes, whatever a URL parser
// makes of it: a secret written with an unescaped '/', '?' or '#' (a
// base64 token) is no userinfo to the parser but a host and a path, query
// or fragment that would quote the rest of it. A URL that does not parse
// is not shown at all.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p // as nats.Connect reads it
		}
		if at, host := strings.LastIndex(p, "@"), strings.Index(p, "://")+len("://"); at >= host {
			p = p[:host] + "REDACTED" + p[at:]
		} else if at >= 0 {
			parts[i] = "<invalid URL>"
			continue
		}
		u, err := url.Parse(p)
		switch {
		case err != nil:
			parts[i] = "<invalid URL>"
		case u.User != nil:
			u.User = url.User("REDACTED")
			parts[i] = u.String()
		default:
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// routeError names r in err, keeping its code (and so its group).
func routeError(r *Route, err error) error {
	var pe *pigeon.Error
	if errors.As(err, &pe) {
		return pigeon.WrapError(pe.Code, err, "route %q: %s", r.Name, pe.Message)
	}
	return pigeon.WrapError(pigeon.CodeInternal, err, "route %q: %v", r.Name, err)
}
