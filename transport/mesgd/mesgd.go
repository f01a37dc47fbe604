// Package mesgd serves mesgd's own WebSocket format on a Pigeon broker,
// so that a mesgd program connects unchanged (docs/protocol.md, "mesgd
// compatibility").
//
// A WebSocket upgrade on /mesgd/<route path> (for example
// /mesgd/kind=chat/room=lobby), with the subprotocol json and a bearer
// token (the Authorization header, or the pigeon.bearer.<token>
// subprotocol, a grant token included), subscribes the connection to the
// route path's selector on the configured subject: every message whose
// data matches is sent as one text frame holding its data. Every JSON
// object the client sends is published to that subject as a message's
// data, governed like any publish: under a contract negotiated for the
// connection's principal, through every gate. A refused frame is answered
// with an error frame, {"error":{"code","message","details"}}, and the
// connection stays up.
//
// The contract is renewed in place shortly before it expires, as a
// session's is (pigeon.RenewDelay), as far as the credential allows; when
// it ends (expired, revoked, refused for good) the connection is closed
// with 1008 and the code as the reason. A delivery is checked against
// the contract again just before it is written (pigeon.Engine.Recheck):
// one that waited its turn past an expiry, a revocation, or a role or
// grant taken away is dropped, and the connection closed so. The server
// pings each connection and drops one that does not answer.
// Reauthenticate checks the credential of every open connection again
// (after the client CAs were reloaded, say) and ends each one refused now
// as a revoked contract ends it, with 1008 and UNAUTHENTICATED.
//
// # Concurrency
//
// A Server is safe for concurrent use. Each connection has one reader,
// which publishes the frames in order, and deliveries write to it as
// they come, in turn with its error frames; Shutdown closes every
// connection with 1001 and waits for their goroutines and the
// revocation of their contracts.
package mesgd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"pigeon"
	"pigeon/internal/wire"
	"pigeon/transport/ws"
)

// Subprotocol is the WebSocket subprotocol of mesgd's format.
const Subprotocol = "json"

// Prefix is the path the endpoint is served under.
const Prefix = "/mesgd"

// Defaults of Options.
const (
	DefaultType      = "mesgd.frame"
	DefaultMaxFrame  = 64 << 10
	writeTimeout     = 10 * time.Second
	renewTimeout     = 10 * time.Second
	defaultClassific = "internal"
	// clockPoll is the longest the renewal of a connection's contract
	// sleeps before it reads the clock again, so that a clock that jumps
	// (a suspended host) does not make it miss the expiry.
	clockPoll = time.Minute
)

// Options configure a Server. New copies them.
type Options struct {
	// Subject is the subject every connection publishes to and
	// subscribes on (required).
	Subject string
	// Intent, Type and Classification fill the envelope of a published
	// frame (defaults: the subject's first intent, DefaultType, the
	// subject's classification or "internal").
	Intent, Type, Classification string
	// Region is a connection's region when its upgrade names none (the
	// x-pigeon-region header or region query parameter); "" is the
	// engine's.
	Region string
	// MaxFrame bounds a frame the client sends (default DefaultMaxFrame).
	MaxFrame int64
	// OriginPatterns lists the origins browsers may connect from besides
	// the server's own host (see websocket.AcceptOptions).
	OriginPatterns []string
	// PingInterval is how often the server pings a connection (default
	// ws.DefaultPingInterval, 30 s; negative: never); PingTimeout is how
	// long it waits for the pong (default ws.DefaultPingTimeout, 15 s)
	// before it drops the connection, and with it its contract, which
	// would otherwise be renewed for a peer long gone.
	PingInterval, PingTimeout time.Duration
	// Logger receives connection events; never payload values.
	Logger *slog.Logger
}

// Server is the mesgd endpoint: an http.Handler for Prefix and below.
type Server struct {
	e    *pigeon.Engine
	opts Options

	mu      sync.Mutex
	conns   map[*websocket.Conn]*conn
	closing bool
	wg      sync.WaitGroup
	// reauths counts the calls of Reauthenticate: an upgrade during one
	// checks its credential again itself.
	reauths atomic.Uint64
	// panics counts the panics survive recovered (Stats.Panics).
	panics atomic.Int64

	// now is the engine's clock (pigeon.Options.Now), poll the longest
	// the renewal sleeps between two readings of it, and armed, when
	// set, learns each time the renewal waits until a new time; tests
	// set them.
	now   func() time.Time
	poll  time.Duration
	armed func(until time.Time)
	// waiting, when set, is called as a delivery starts to wait for its
	// turn to write; tests set it.
	waiting func()
}

// Stats are a server's counters since it started.
type Stats struct {
	// Panics counts the panics the server survived, of a connection's
	// handler (each logged with its stack and closing its connection with
	// 1011): the engine's Observer does not see them.
	Panics int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats { return Stats{Panics: s.panics.Load()} }

// New returns the mesgd endpoint of e for opts.Subject.
func New(e *pigeon.Engine, opts Options) *Server {
	if opts.Type == "" {
		opts.Type = DefaultType
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PingInterval == 0 {
		opts.PingInterval = ws.DefaultPingInterval
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = ws.DefaultPingTimeout
	}
	opts.OriginPatterns = append([]string(nil), opts.OriginPatterns...)
	return &Server{e: e, opts: opts, conns: map[*websocket.Conn]*conn{}, now: time.Now, poll: clockPoll}
}

// conn is what Reauthenticate needs of an open connection.
type conn struct {
	ws        *websocket.Conn
	principal *pigeon.Principal
	cred      pigeon.Credential // what the upgrade authenticated
	contract  string
	remote    string
	// refusal is set when Reauthenticate found cred refused: the close
	// that ends the connection names its code, whichever way it comes.
	refusal atomic.Pointer[error]
}

// Selector returns the selector text of an endpoint path as the request
// carries it, escaped (url.URL.EscapedPath; not url.URL.Path, where %2F
// is already a '/'): /mesgd/kind=chat selects "/kind=chat", and /mesgd or
// /mesgd/ selects every message ("/*"). One trailing '/' is dropped; an
// empty segment anywhere else (/mesgd//, /mesgd/kind=chat//) is
// SELECTOR_INVALID, as pigeon.ParseSelector refuses one.
//
// The path is split on '/' before anything is unescaped, so that a value
// may hold a '/': /mesgd/room=a%2Fb selects room equal to "a/b". In each
// segment an escape of a character the selector syntax reserves ('/',
// '=', '.', '%', '*'; docs/delivery.md) stays the selector's own escape,
// so it is that character literally (room=%2A is room equal to "*", not
// the '*' segment); any other escape is decoded (%20 a space, %C3%A9
// "é"). A malformed escape is SELECTOR_INVALID; pigeon.ParseSelector
// then refuses what no selector is (bytes that are not UTF-8, control
// characters, an empty segment, ...).
func Selector(escapedPath string) (string, error) {
	rest, ok := strings.CutPrefix(escapedPath, "/")
	if !ok {
		return "", pigeon.NewError(pigeon.CodeSelectorInvalid, "the path must start with '/'")
	}
	first, rest, _ := strings.Cut(rest, "/")
	if p, err := url.PathUnescape(first); err != nil || "/"+p != Prefix {
		return "", pigeon.NewError(pigeon.CodeSelectorInvalid, "the path is not under %s", Prefix)
	}
	if rest == "/" || strings.HasSuffix(rest, "//") {
		return "", pigeon.NewError(pigeon.CodeSelectorInvalid, "the route path has an empty segment")
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return "/*", nil
	}
	if len(rest) > 3*pigeon.MaxSelectorLen {
		return "", pigeon.NewError(pigeon.CodeSelectorInvalid, "the route path is %d bytes, over the limit of %d", len(rest), 3*pigeon.MaxSelectorLen)
	}
	var b strings.Builder
	b.Grow(len(rest) + 1)
	off := len(Prefix) + 1 // byte offset in the escaped path
	for seg := range strings.SplitSeq(rest, "/") {
		b.WriteByte('/')
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if c != '%' {
				b.WriteByte(c)
				continue
			}
			if i+2 >= len(seg) || unhex(seg[i+1]) < 0 || unhex(seg[i+2]) < 0 {
				return "", pigeon.NewError(pigeon.CodeSelectorInvalid, "invalid escape at byte %d of the path", off+i)
			}
			switch d := byte(unhex(seg[i+1])<<4 | unhex(seg[i+2])); d {
			case '/', '=', '.', '%', '*':
				b.WriteString(strings.ToUpper(seg[i : i+3])) // the selector's escape of d
			default:
				b.WriteByte(d)
			}
			i += 2
		}
		off += len(seg) + 1
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// escapedPath is r's path as it came, escapes kept: RawPath when it is
// an encoding of Path (EscapedPath would drop one holding bytes that
// are not ASCII, and with it the difference between %2F and '/').
func escapedPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// selectorOf is the selector of r's path, parsed.
func selectorOf(r *http.Request) (string, error) {
	sel, err := Selector(escapedPath(r.URL))
	if err != nil {
		return "", err
	}
	if _, err := pigeon.ParseSelector(sel); err != nil {
		return "", err
	}
	return sel, nil
}

// ServeHTTP authenticates the upgrade, negotiates the connection's
// contract, upgrades and serves the connection until it ends. Refusals
// before the upgrade are answered with the JSON error body and the
// status of their code.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sel, err := selectorOf(r)
	if err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	// A page of another origin is refused before its credential is looked
	// at, as on /v1/ws (ws.CheckOrigin): it authenticates no one and counts
	// toward no lockout of the browser's address.
	if err := ws.CheckOrigin(r, s.opts.OriginPatterns); err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	gen := s.reauths.Load()
	p, region, cred, err := ws.AuthenticateUpgradeCredential(s.e, r, s.opts.Region)
	if err != nil {
		ws.WriteUpgradeError(w, err)
		return
	}
	// Shutdown waits for the connection from before its contract is
	// negotiated until after it is revoked (the defers run in reverse):
	// were the revocation left to run after Shutdown returned, the broker
	// would shut the engine down under it, and the contract would stay
	// live in the store until its expiry.
	if !s.enter() {
		wire.WriteHTTPError(w, pigeon.NewError(pigeon.CodeShutdown, "the server is shutting down"))
		return
	}
	defer s.wg.Done()
	k, err := s.e.Negotiate(ctx, p, region, []string{s.opts.Subject}, 0)
	if err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	caller := pigeon.Caller{Principal: p, Region: k.Info().Region, ContractID: k.ID()}
	defer func() { _ = s.e.RevokeContract(context.WithoutCancel(ctx), p, k.ID()) }()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, OriginPatterns: s.opts.OriginPatterns})
	if err != nil {
		return
	}
	c.SetReadLimit(s.opts.MaxFrame)
	if !s.track(&conn{ws: c, principal: p, cred: cred, contract: k.ID(), remote: r.RemoteAddr}) {
		_ = c.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer s.untrack(c)
	defer s.survive(c, p) // before untrack closes the connection without a word
	if s.reauths.Load() != gen {
		// Reauthenticate ran since the upgrade was authenticated, and may
		// have missed this connection, not yet tracked: check it here.
		if refused, err := ws.Reverify(ctx, s.e, cred, p); refused {
			s.opts.Logger.Warn("mesgd credential refused when checked again; closing", "principal", p.ID, "remote", r.RemoteAddr, "code", pigeon.ErrorCode(err))
			s.end(c, err)
			return
		}
	}
	s.opts.Logger.Debug("mesgd connected", "principal", p.ID, "selector", sel, "remote", r.RemoteAddr)
	// turn is held by whoever writes a data frame (a delivery, an error
	// frame), so that a delivery knows when its turn comes: one whose
	// contract ended while it waited behind a frame the client had not
	// read yet is dropped, not written after the end.
	turn := make(chan struct{}, 1)
	var bg sync.WaitGroup // the connection's goroutines, waited for after cancel
	defer bg.Wait()
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	bg.Go(func() { s.renewLoop(cctx, c, p, k) })
	if s.opts.PingInterval > 0 {
		bg.Go(func() { s.pingLoop(cctx, c, p) })
	}
	if k.Allows(s.opts.Subject, pigeon.OpReceive) {
		opts := []pigeon.SubscribeOption{pigeon.WithSelector(sel)}
		if sp, err := s.e.Subject(s.opts.Subject); err == nil && sp.Mode == pigeon.ModePubSub {
			opts = append(opts, pigeon.WithAtMostOnce()) // as mesgd: a frame missed while away is not kept
		}
		sub, err := s.e.Subscribe(cctx, caller, s.opts.Subject, func(ctx context.Context, d *pigeon.Delivery) error {
			// Written under the connection's context, not the
			// delivery's: a revocation cancels that, and a write it
			// cancels midway makes the library drop the
			// connection, where the close that follows (1008 and the
			// code) is what tells the client what happened. A frame
			// judged before the revocation is written whole; one still
			// waiting its turn then (ctx ended) never goes out.
			//
			// A frame that did not go out whole (the client left, or
			// stopped reading until the write timed out) never reached
			// the client either: on a work-queue subject it goes back to
			// the group with no attempt spent (ErrUndelivered), rather
			// than count as the client's failure, for a consumer that
			// leaves mid-frame would use up a message's attempts unread.
			cut, err := s.deliver(ctx, cctx, c, turn, caller, d.Message.Data)
			if err == nil {
				return nil
			}
			if pigeon.RenewalFinal(err) {
				// The contract stopped allowing the delivery while it
				// waited its turn (it expired, a role or grant it relied
				// on was taken away): nothing goes out under it any more,
				// and the client learns why, as when the subscription
				// ends.
				s.end(c, err)
			}
			if cut {
				// The connection is over (a failed write closes it, or it
				// is closing already): the delivery is held, its turn
				// given up, until the subscription ends with it, so that
				// what goes back is not handed to this connection again
				// and again meanwhile.
				<-ctx.Done()
			}
			return fmt.Errorf("%w: %w", pigeon.ErrUndelivered, err)
		}, opts...)
		if err != nil {
			_ = c.Close(websocket.StatusPolicyViolation, string(pigeon.ErrorCode(err)))
			return
		}
		defer func() { _ = sub.Unsubscribe(context.Background()) }()
		bg.Go(func() {
			<-sub.Done()
			if err := sub.Err(); err != nil { // the contract ended: the client reconnects
				s.end(c, err)
			}
		})
	}
	s.read(cctx, c, turn, caller)
}

// survive, deferred by a connection's handler once upgraded, turns a
// panic of it (the broker's publish of a frame the client sent, a
// subscription starting) into the end of this connection alone, closed
// with 1011 (the handler's deferred work then ends its subscription and
// revokes its contract, as at any end). Unrecovered, the panic reached
// net/http, which logged it whole, card numbers with it, and the client
// saw its connection cut without a close frame. Here it is logged with
// its stack, card numbers redacted, and counted in Stats.Panics (before
// the close, so that a client that sees the close sees it counted).
func (s *Server) survive(c *websocket.Conn, p *pigeon.Principal) {
	r := recover()
	if r == nil {
		return
	}
	s.panics.Add(1)
	s.opts.Logger.Error("a mesgd connection panicked: closing it", "principal", p.ID,
		"panic", pigeon.RedactPANs(fmt.Sprint(r)), "stack", string(debug.Stack()))
	_ = c.Close(websocket.StatusInternalError, "internal error")
}

// read publishes every frame the client sends until the connection ends.
func (s *Server) read(ctx context.Context, c *websocket.Conn, turn chan struct{}, caller pigeon.Caller) {
	intent, class := s.opts.Intent, s.opts.Classification
	if sp, err := s.e.Subject(s.opts.Subject); err == nil {
		if intent == "" && len(sp.Intents) > 0 {
			intent = sp.Intents[0]
		}
		if class == "" {
			class = sp.Data.Classification
		}
	}
	if class == "" {
		class = defaultClassific
	}
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText || len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			s.refuse(ctx, c, turn, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be a JSON object"))
			continue
		}
		m := &pigeon.Message{Type: s.opts.Type, Subject: s.opts.Subject, Intent: intent, Classification: class, Data: b}
		if _, err := s.e.Publish(ctx, caller, m); err != nil {
			s.refuse(ctx, c, turn, err)
			if pigeon.RenewalFinal(err) {
				// The contract is over for good (revoked, say): close as a
				// subscriber's connection closes, for the client to
				// reconnect, rather than refuse every frame after it.
				s.end(c, err)
				return
			}
		}
	}
}

// renewLoop renews the connection's contract k in place (same id) shortly
// before it expires (pigeon.RenewDelay, on the engine's clock), as an
// in-process session does, until ctx ends. A renewal that fails for a
// reason that may pass is tried again (pigeon.RenewRetry); one refused
// for good (pigeon.RenewalFinal) or that cannot lengthen the contract
// (the credential ends first) is not tried again, and at the expiry the
// connection is closed with 1008 CONTRACT_EXPIRED. A contract found
// revoked (or otherwise over) closes it at once with the refusal's code.
func (s *Server) renewLoop(ctx context.Context, c *websocket.Conn, p *pigeon.Principal, k pigeon.Contract) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var (
		retry time.Duration
		final bool // no renewal will lengthen k: wait for its expiry
	)
	for {
		exp := k.ExpiresAt()
		left := exp.Sub(s.now())
		if left <= 0 {
			s.end(c, pigeon.NewError(pigeon.CodeContractExpired, "the contract has expired"))
			return
		}
		wait := left
		if !final {
			wait = pigeon.RenewDelay(left, retry)
		}
		retry = 0
		if !s.sleep(ctx, t, s.now().Add(wait)) {
			return
		}
		if final || !k.ExpiresAt().Equal(exp) || !s.now().Before(exp) {
			continue // nothing to renew, renewed meanwhile, or expired: see above
		}
		rctx, cancel := context.WithTimeout(ctx, renewTimeout)
		renewed, err := s.e.RenewContract(rctx, p, k.ID(), 0)
		cancel()
		switch code := pigeon.ErrorCode(err); {
		case ctx.Err() != nil:
			return
		case err == nil && !renewed.ExpiresAt().After(exp):
			final = true
			s.opts.Logger.Debug("mesgd contract renewed as far as the credential goes", "principal", p.ID, "contract", k.ID(), "expires", exp)
		case err == nil:
		case code == pigeon.CodeContractRevoked || code == pigeon.CodeContractExpired ||
			code == pigeon.CodeContractNotFound || code == pigeon.CodeContractPrincipalMismatch:
			s.end(c, err) // the contract is over now
			return
		case pigeon.RenewalFinal(err):
			final = true
			s.opts.Logger.Info("mesgd contract cannot be renewed; the connection ends at its expiry", "principal", p.ID, "contract", k.ID(), "code", code)
		case code == pigeon.CodeShutdown:
			return // the server shuts down too
		default:
			s.opts.Logger.Warn("mesgd renewing a contract failed; trying again", "principal", p.ID, "contract", k.ID(), "code", code)
			retry = pigeon.RenewRetry(exp.Sub(s.now()))
		}
	}
}

// pingLoop pings c every PingInterval until ctx ends, and drops it when a
// pong does not come back within PingTimeout: a peer that does not answer
// pings will not answer a close handshake either.
func (s *Server) pingLoop(ctx context.Context, c *websocket.Conn, p *pigeon.Principal) {
	t := time.NewTicker(s.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, s.opts.PingTimeout)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.opts.Logger.Warn("mesgd keepalive timeout; closing", "principal", p.ID)
				_ = c.CloseNow()
			}
			return
		}
	}
}

// sleep waits until the engine's clock reads until (false: ctx ended
// first), reading it again at least every s.poll.
func (s *Server) sleep(ctx context.Context, t *time.Timer, until time.Time) bool {
	if s.armed != nil {
		s.armed(until)
	}
	for {
		d := until.Sub(s.now())
		if d <= 0 {
			return true
		}
		t.Reset(min(d, s.poll))
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// end closes c because its contract ended (err names how): 1008 with
// the code as the reason; mesgd clients reconnect. When Reauthenticate
// refused c's credential, the reason is that refusal's code, whatever
// ended the contract (its revocation, which followed).
func (s *Server) end(c *websocket.Conn, err error) {
	s.mu.Lock()
	if mc := s.conns[c]; mc != nil {
		if r := mc.refusal.Load(); r != nil {
			err = *r
		}
	}
	s.mu.Unlock()
	_ = c.Close(websocket.StatusPolicyViolation, string(pigeon.ErrorCode(err)))
}

// Reauthenticate checks again, for every open connection, the credential
// its upgrade was authenticated with (its TLS client certificate chain and
// its bearer token; ws.Reverify), as the engine would judge it now: after
// the client CAs were reloaded, say, or a token withdrawn. A connection
// whose credential is refused now is ended as a revoked contract ends
// one: its contract is revoked (audited contract.revoked; its
// subscription ends, and a delivery waiting its turn is not written) and
// it is closed with 1008 and the refusal's code as the reason
// (UNAUTHENTICATED). It is logged with the principal, the address and the
// code, never the credential. Connections still accepted are left alone:
// their principal's roles are read again at each check anyway.
//
// It returns how many connections it ended, each once its contract is
// revoked and its close begun, and an error joining the checks and the
// revocations that failed (an identity provider unreachable, ctx ended):
// a connection whose check failed stays up.
func (s *Server) Reauthenticate(ctx context.Context) (ended int, err error) {
	s.reauths.Add(1) // an upgrade authenticated before, not yet tracked, checks itself
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range conns {
		refused, err := ws.Reverify(ctx, s.e, c.cred, c.principal)
		if !refused {
			if err != nil {
				errs = append(errs, fmt.Errorf("principal %s: %w", c.principal.ID, err))
			}
			continue
		}
		if !c.refusal.CompareAndSwap(nil, &err) {
			continue // ended by an earlier call
		}
		ended++
		s.opts.Logger.Warn("mesgd credential refused when checked again; revoking its contract and closing",
			"principal", c.principal.ID, "remote", c.remote, "code", pigeon.ErrorCode(err))
		if rerr := s.e.RevokeContract(ctx, c.principal, c.contract); rerr != nil {
			switch pigeon.ErrorCode(rerr) {
			case pigeon.CodeContractNotFound, pigeon.CodeContractExpired: // over already
			default:
				errs = append(errs, fmt.Errorf("principal %s: revoking contract %s: %w", c.principal.ID, c.contract, rerr))
			}
		}
		// The close handshake waits for the client's answer: not here.
		go s.end(c.ws, err)
	}
	return ended, errors.Join(errs...)
}

// deliver writes a delivery's data to c in its turn, under cctx (the
// connection's), unless ctx (the delivery's) ends first or caller's
// contract no longer allows it to receive when the turn comes; cut
// reports a write that failed.
//
// The engine judged the delivery before it handed it over, but it may
// have waited its turn since, behind a frame the client does not read:
// a revocation cancels ctx, while an expiry, a role taken from the
// account or a grant revoked meanwhile cancel nothing, and are caught by
// checking the contract again (pigeon.Engine.Recheck) just before the
// write, so that nothing is written after the moment the contract
// stopped allowing it.
func (s *Server) deliver(ctx, cctx context.Context, c *websocket.Conn, turn chan struct{}, caller pigeon.Caller, data []byte) (cut bool, err error) {
	if s.waiting != nil {
		s.waiting()
	}
	select {
	case turn <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-turn }()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := s.e.Recheck(ctx, caller, s.opts.Subject, pigeon.OpReceive); err != nil {
		return false, err
	}
	wctx, cancel := context.WithTimeout(cctx, writeTimeout)
	defer cancel()
	if err := c.Write(wctx, websocket.MessageText, data); err != nil {
		return true, err
	}
	return false, nil
}

// refuse answers a refused frame with an error frame, in its turn.
func (s *Server) refuse(ctx context.Context, c *websocket.Conn, turn chan struct{}, err error) {
	b, _ := json.Marshal(map[string]any{"error": wire.Encode(err)})
	turn <- struct{}{}
	defer func() { <-turn }()
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, b)
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c.ws] = c
	return true
}

func (s *Server) untrack(c *websocket.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.CloseNow()
}

// Shutdown closes every connection with 1001 and waits for them to end,
// their contracts revoked (and for upgrades under way to be refused), or
// for ctx. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*websocket.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go func() { _ = c.Close(websocket.StatusGoingAway, "server shutting down") }()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
