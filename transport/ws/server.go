package ws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"

	"pigeon"
	"pigeon/internal/readpool"
	"pigeon/internal/wire"
)

// Server is the WebSocket endpoint of an engine: an http.Handler that
// authenticates the upgrade and then speaks the frame protocol of
// docs/protocol.md on the connection. It is safe for concurrent use.
type Server struct {
	e    *pigeon.Engine
	opts Options

	mu           sync.Mutex
	conns        map[*conn]struct{}
	perPrincipal map[string]int // principal id → slots admit reserved; absent at 0
	closing      bool
	wg           sync.WaitGroup
	shutOnce     sync.Once
	drained      chan struct{}

	reqMu    sync.Mutex
	reqBytes map[string]int64 // principal id → bytes its requests waiting for replies hold; absent at 0

	// reauths counts the calls of Reauthenticate: an upgrade during one
	// checks its credential again itself.
	reauths atomic.Uint64

	budget budget         // bytes queued for writing, across connections
	reads  *readpool.Pool // bytes read by replays and receives not yet queued
	stats  counters
}

type counters struct {
	open, accepted, refused, stalled, tooBig, badText, pingTimeouts, rateLimited, queuedPeak, cut, panics atomic.Int64
}

// Stats are a server's counters since it started.
type Stats struct {
	// Open is the number of open connections.
	Open int64
	// Accepted counts upgraded connections; Refused counts upgrades refused
	// (unauthenticated, over the connection limit, shutting down).
	Accepted, Refused int64
	// Stalled counts connections closed with 1008 because their write queue
	// stayed full, and those aborted because an answer written without the
	// queue made no progress for the stall timeout; PingTimeouts those closed because a pong never came;
	// TooBig those closed with 1009; InvalidText those closed with 1007
	// because a text frame was not UTF-8.
	Stalled, PingTimeouts, TooBig, InvalidText int64
	// RateLimited counts frames refused RATE_LIMITED, wholly or (a
	// publish_batch past the rate) in some of their slots: past the
	// connection's publish rate, its requests in flight, its principal's
	// request bytes (and a request of another route, HoldRequest, refused
	// by that bound), or the read pool (a replay or receive, also counted
	// in ReadsRefused). Upgrades refused are counted in Refused.
	RateLimited int64
	// QueuedBytes is the bytes of frames waiting to be written, across
	// connections (bounded by Options.ServerQueueBytes); QueuedBytesPeak
	// the most there ever were.
	QueuedBytes, QueuedBytesPeak int64
	// ReadBytes is the bytes replay and receive frames hold before their
	// answer is queued (bounded by Options.MaxReadBytesInFlight);
	// ReadsRefused counts those refused for want of room: RATE_LIMITED
	// (counted in RateLimited too), or REQUEST_TIMEOUT when the frame's
	// connection ended while it waited.
	ReadBytes, ReadsRefused int64
	// CutFrames counts deliver frames dropped from a write queue because
	// the engine ended their subscription for a refusal (its contract
	// revoked or expired, a role taken away) before they were written.
	CutFrames int64
	// Panics counts the panics the server survived, of an op's worker or
	// of a connection's read loop (each answered INTERNAL, logged with its
	// stack and closing its connection with 1011): the engine's Observer
	// does not see them.
	Panics int64
}

// NewServer returns the WebSocket endpoint of e.
func NewServer(e *pigeon.Engine, opts *Options) *Server {
	s := &Server{e: e, opts: opts.withDefaults(), conns: map[*conn]struct{}{}, perPrincipal: map[string]int{}, reqBytes: map[string]int64{}, drained: make(chan struct{})}
	s.budget = budget{limit: s.opts.ServerQueueBytes, peak: &s.stats.queuedPeak}
	s.reads = readpool.ForEngine(e, s.opts.MaxReadBytesInFlight, s.opts.MaxReadBytesPerPrincipal, readWait, s.opts.Logger)
	return s
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{Open: c.open.Load(), Accepted: c.accepted.Load(), Refused: c.refused.Load(), Stalled: c.stalled.Load(),
		PingTimeouts: c.pingTimeouts.Load(), TooBig: c.tooBig.Load(), InvalidText: c.badText.Load(), RateLimited: c.rateLimited.Load(),
		QueuedBytes: s.budget.inUse(), QueuedBytesPeak: c.queuedPeak.Load(), CutFrames: c.cut.Load(), Panics: c.panics.Load(),
		ReadBytes: s.reads.InUse(), ReadsRefused: int64(s.reads.Refused())}
}

// upgradeCredential returns the bearer token of an upgrade request: the
// Authorization header, or the pigeon.bearer.<token> subprotocol (for
// browsers, which cannot set headers on an upgrade). A request that gives
// both, or two bearer subprotocols, is BAD_REQUEST: which one counts would
// depend on the reader.
func upgradeCredential(r *http.Request) (string, error) {
	var token string
	found := 0
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			p = strings.Trim(p, " \t")
			if len(p) > len(BearerSubprotocolPrefix) && strings.EqualFold(p[:len(BearerSubprotocolPrefix)], BearerSubprotocolPrefix) {
				token = p[len(BearerSubprotocolPrefix):]
				found++
			}
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		if found > 0 {
			return "", pigeon.NewError(pigeon.CodeBadRequest, "the request gives a credential twice, in the Authorization header and a bearer subprotocol: give one")
		}
		return wire.Bearer(h), nil
	}
	if found > 1 {
		return "", pigeon.NewError(pigeon.CodeBadRequest, "the request offers %d bearer subprotocols: offer one", found)
	}
	return token, nil
}

// AuthenticateUpgrade resolves who opens a WebSocket upgrade request and
// in which region: the principal of its credential (upgradeCredential and
// the TLS peer), then the region of the x-pigeon-region header, else the
// ?region= parameter, else defaultRegion. A request that is not an upgrade
// is BAD_REQUEST, checked after the credential so that an unauthenticated
// caller learns nothing more. WriteUpgradeError answers its error.
func AuthenticateUpgrade(e *pigeon.Engine, r *http.Request, defaultRegion string) (*pigeon.Principal, string, error) {
	p, region, _, err := AuthenticateUpgradeCredential(e, r, defaultRegion)
	return p, region, err
}

// AuthenticateUpgradeCredential is AuthenticateUpgrade, and the credential
// it authenticated (the bearer token and the TLS peer's certificates), for
// a server that keeps it to check it again while the connection lasts
// (Reverify).
func AuthenticateUpgradeCredential(e *pigeon.Engine, r *http.Request, defaultRegion string) (*pigeon.Principal, string, pigeon.Credential, error) {
	if err := wire.CheckOnce(r, wire.OnceHeaders...); err != nil {
		return nil, "", pigeon.Credential{}, err
	}
	token, err := upgradeCredential(r)
	if err != nil {
		return nil, "", pigeon.Credential{}, err
	}
	cred := wire.Credential(r, token)
	p, err := e.AuthenticateCredential(r.Context(), cred)
	if err != nil {
		return nil, "", pigeon.Credential{}, err
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return nil, "", pigeon.Credential{}, pigeon.NewError(pigeon.CodeBadRequest, "this endpoint speaks WebSocket: send an upgrade request")
	}
	region := r.Header.Get("X-Pigeon-Region")
	query := r.URL.Query()["region"]
	switch {
	case len(query) > 1:
		return nil, "", pigeon.Credential{}, pigeon.NewError(pigeon.CodeBadRequest, "the region parameter is given %d times: give it once", len(query))
	case len(query) == 1 && region != "" && query[0] != region:
		return nil, "", pigeon.Credential{}, pigeon.NewError(pigeon.CodeBadRequest, "the x-pigeon-region header and the region parameter name two regions: give one")
	case region == "" && len(query) == 1:
		region = query[0]
	}
	if region == "" {
		region = defaultRegion
	}
	if err := pigeon.CheckRegion(region); err != nil {
		return nil, "", pigeon.Credential{}, err
	}
	return p, region, cred, nil
}

// Reverify authenticates cred again, the credential a connection of p was
// opened with (AuthenticateUpgradeCredential), as the engine judges it now
// (pigeon.Engine.Reauthenticate: not counted toward the source's lockout).
// It returns nil while the credential still stands for p; refused true and
// the refusal when it is refused now (UNAUTHENTICATED: its CA withdrawn, a
// token no longer configured; GRANT_REVOKED; FORBIDDEN) or stands for
// another principal, and the connection must end; refused false and the
// error when it could not be checked (an identity provider unreachable,
// the engine shutting down, ctx ended), and the connection stays.
func Reverify(ctx context.Context, e *pigeon.Engine, cred pigeon.Credential, p *pigeon.Principal) (refused bool, err error) {
	q, err := e.Reauthenticate(ctx, cred)
	switch pigeon.ErrorCode(err) {
	case pigeon.CodeOK:
		if q.ID != p.ID {
			return true, pigeon.NewError(pigeon.CodeUnauthenticated, "the connection's credential no longer stands for its principal")
		}
		return false, nil
	case pigeon.CodeUnauthenticated, pigeon.CodeGrantRevoked, pigeon.CodeForbidden:
		return true, err
	}
	return false, err
}

// CheckOrigin refuses, FORBIDDEN, an upgrade request a browser sends for a
// page of another origin than the server's: one whose Origin header names
// another host than the request's and that no pattern of patterns matches
// (host patterns as websocket.AcceptOptions.OriginPatterns reads them: the
// origin's host with its port, or scheme://host when the pattern names a
// scheme; case does not matter). A request without Origin (a client that is
// not a browser) passes. It is the WebSocket library's own check, made
// before the credential is looked at: a page of any site can have each
// browser that opens it try upgrades with made-up credentials, which, were
// they checked first, would each count as a refused credential of the
// browser's address and lock everyone behind it out of the broker; and a
// browser's ambient credential (a TLS client certificate) would be
// authenticated for a page that may not use it.
func CheckOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(r.Host, u.Host) {
		return nil
	}
	if OriginAllowed(patterns, origin) {
		return nil
	}
	return pigeon.NewError(pigeon.CodeForbidden, "a page of another origin may not connect: the server's allowed origins do not name its origin")
}

// OriginAllowed reports whether a pattern of patterns matches origin (a
// browser's Origin header), as websocket.AcceptOptions.OriginPatterns
// reads them: the origin's host with its port, or scheme://host when the
// pattern names a scheme (path.Match syntax); case does not matter. An
// origin without a host ("null") matches none.
func OriginAllowed(patterns []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// WriteUpgradeError answers a refused upgrade request: the JSON error body
// with its code's status, and a Bearer challenge on UNAUTHENTICATED.
func WriteUpgradeError(w http.ResponseWriter, err error) {
	if pigeon.ErrorCode(err) == pigeon.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pigeon"`)
	}
	wire.WriteHTTPError(w, err)
}

// ServeHTTP authenticates the upgrade request and serves the connection
// until it ends. A missing or unknown credential is answered 401 with the
// JSON error body, and the connection is not upgraded.
//
// A browser page of another origin (CheckOrigin) is refused 403 before
// anything else, its credential included: its upgrade authenticates no
// one and counts toward no lockout of the browser's address.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := CheckOrigin(r, s.opts.OriginPatterns); err != nil {
		s.stats.refused.Add(1)
		wire.WriteHTTPError(w, err)
		return
	}
	gen := s.reauths.Load()
	p, region, cred, err := AuthenticateUpgradeCredential(s.e, r, s.opts.Region)
	if err != nil {
		s.stats.refused.Add(1)
		WriteUpgradeError(w, err)
		return
	}
	if where, err := s.admit(p.ID); err != nil {
		s.stats.refused.Add(1)
		if where != "" {
			s.upgradeDenied(r.Context(), p, where)
		}
		wire.WriteHTTPError(w, err)
		return
	}
	defer s.wg.Done()
	cw := &corkWriter{ResponseWriter: w}
	wsc, err := websocket.Accept(cw, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, OriginPatterns: s.opts.OriginPatterns})
	if err != nil {
		s.stats.refused.Add(1)
		s.release(p.ID, nil)
		return
	}
	wsc.SetReadLimit(s.opts.MaxFrame)
	c := newConn(r.Context(), s, wsc, cw.cc, p, region)
	c.cred, c.remote = cred, r.RemoteAddr
	if !s.track(c) {
		_ = wsc.Close(websocket.StatusGoingAway, "server shutting down")
		s.release(p.ID, nil)
		return
	}
	if s.reauths.Load() != gen {
		// Reauthenticate ran since the upgrade was authenticated, and may
		// have missed this connection, not yet tracked: check it here.
		if refused, err := Reverify(r.Context(), s.e, cred, p); refused {
			s.stats.refused.Add(1)
			s.opts.Logger.WarnContext(r.Context(), "websocket credential refused when checked again; closing",
				"principal", p.ID, "remote", r.RemoteAddr, "code", pigeon.ErrorCode(err))
			_ = wsc.Close(websocket.StatusPolicyViolation, string(pigeon.ErrorCode(err)))
			c.cancel()
			s.release(p.ID, c)
			return
		}
	}
	s.stats.accepted.Add(1)
	s.opts.Logger.DebugContext(r.Context(), "websocket connected", "principal", p.ID, "region", region, "remote", r.RemoteAddr)
	c.serve()
	s.release(p.ID, c)
	s.opts.Logger.DebugContext(r.Context(), "websocket closed", "principal", p.ID, "remote", r.RemoteAddr)
}

// admit reserves a connection slot for principal. Refused RATE_LIMITED,
// where names the bound that refused it ("connection limit",
// "connections per principal"), for upgradeDenied; it is empty when the
// server is shutting down.
func (s *Server) admit(principal string) (where string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return "", errServerShutdown()
	}
	if s.stats.open.Load() >= int64(s.opts.MaxConnections) {
		return "connection limit", pigeon.NewError(pigeon.CodeRateLimited, "connection limit reached")
	}
	if limit := s.opts.MaxConnectionsPerPrincipal; limit >= 0 && s.perPrincipal[principal] >= limit {
		return "connections per principal", pigeon.NewError(pigeon.CodeRateLimited, "this principal holds %d connections, the most allowed", limit)
	}
	s.perPrincipal[principal]++
	s.stats.open.Add(1)
	s.wg.Add(1)
	return "", nil
}

// upgradeDenied audits an upgrade of p, authenticated, refused
// RATE_LIMITED by admit at where, the bound it met (MaxConnections or
// MaxConnectionsPerPrincipal): an access.denied record, as an operation
// refused to a principal is audited, naming the principal and the
// operation ("ws upgrade connection limit", "ws upgrade connections per
// principal"). The engine coalesces it per principal and code: a client
// that reconnects in a loop writes a record and a count a second, the
// count naming the latest refusal's operation. It runs after admit gave
// its lock back, on the upgrade's own goroutine; the refusal stands
// whether or not its record is written.
func (s *Server) upgradeDenied(ctx context.Context, p *pigeon.Principal, where string) {
	_ = s.e.Record(ctx, pigeon.EventAccessDenied, pigeon.CodeRateLimited, pigeon.AuditRecord{Principal: p.ID, Ref: "ws upgrade " + where})
}

// track registers an accepted connection unless the server is closing.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// release gives back the slot admit reserved for principal, and forgets
// c (nil when the connection was never tracked).
func (s *Server) release(principal string, c *conn) {
	s.mu.Lock()
	if c != nil {
		delete(s.conns, c)
	}
	if s.perPrincipal[principal]--; s.perPrincipal[principal] <= 0 {
		delete(s.perPrincipal, principal)
	}
	s.mu.Unlock()
	s.stats.open.Add(-1)
}

// Shutdown stops accepting connections and closes every open one
// gracefully: it stops taking new work (a frame read meanwhile is answered
// SHUTTING_DOWN; an ack or nack of a delivery is still taken), ends the
// connection's subscriptions (their unanswered deliveries go back for
// redelivery), lets every frame already being worked on finish and its
// answer be written, and then closes with status 1001. It waits for all
// of that or for ctx; when ctx ends first it closes what is left at once
// (each connection's teardown goes on meanwhile) and returns ctx.Err()
// without waiting for those teardowns: one held by code that never
// returns would otherwise hold Shutdown, and the process ending with it,
// past its deadline. It is idempotent: a later call waits again, for the
// connections to be torn down or for its own ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			go c.drain()
		}
		go func() {
			s.wg.Wait()
			close(s.drained)
		}()
	})
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.abort()
		}
		s.mu.Unlock()
		return ctx.Err()
	}
}

// Reauthenticate checks again, for every open connection, the credential
// its upgrade was authenticated with (its TLS client certificate chain and
// its bearer token; Reverify), as the engine would judge it now: after the
// client CAs were reloaded, say, or a token withdrawn. A connection whose
// credential is refused now is ended as a revoked contract ends one: no
// frame read from then on is worked on (each is answered with the
// refusal), every contract it negotiated is revoked (audited
// contract.revoked; its subscriptions end, their unanswered deliveries go
// back to their groups, and nothing still queued for them is written),
// and it is closed with 1008 and the refusal's code as the reason
// (UNAUTHENTICATED) once the frames queued before are written. It is
// logged with the principal, the address and the code, never the
// credential. Connections still accepted are left alone: their
// principal's roles are read again at each check anyway.
//
// It returns how many connections it ended, each once its contracts are
// revoked and its close queued, and an error joining the checks and the
// revocations that failed (an identity provider unreachable, ctx ended):
// a connection whose check failed stays up.
func (s *Server) Reauthenticate(ctx context.Context) (ended int, err error) {
	s.reauths.Add(1) // an upgrade authenticated before, not yet tracked, checks itself
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var errs []error
	for _, c := range conns {
		if c.ctx.Err() != nil {
			continue // ending already
		}
		refused, err := Reverify(ctx, s.e, c.cred, c.principal)
		if !refused {
			if err != nil {
				errs = append(errs, fmt.Errorf("principal %s: %w", c.principal.ID, err))
			}
			continue
		}
		if c.refuse(ctx, err, &errs) {
			ended++
		}
	}
	return ended, errors.Join(errs...)
}

// requestOverhead is what a request waiting for its reply holds besides
// its message's data: the envelope's other fields (up to MaxEnvelopeField
// each), the frame, the goroutine waiting and the engine's waiter.
const requestOverhead = 4 << 10

// requestCost is what a request of m counts toward its principal's
// MaxRequestBytesPerPrincipal.
func requestCost(m *pigeon.Message) int64 {
	if m == nil {
		return requestOverhead
	}
	return int64(len(m.Data)) + requestOverhead
}

// frameRequestCost is what a request frame f counts toward its
// principal's MaxRequestBytesPerPrincipal: as requestCost, or its whole
// frame and requestOverhead when that is more, since its id and every
// member it decoded stay with it while it waits.
func frameRequestCost(f *Frame) int64 {
	return max(requestCost(f.Message), int64(f.size)+requestOverhead)
}

// holdRequest counts n bytes toward the requests of principal waiting for
// replies, unless that takes it past MaxRequestBytesPerPrincipal; a
// principal with none waiting may always take one. It returns what
// releaseRequest gives back (0 when nothing is counted) and whether the
// request may go on.
func (s *Server) holdRequest(principal string, n int64) (int64, bool) {
	limit := s.opts.MaxRequestBytesPerPrincipal
	if limit < 0 {
		return 0, true
	}
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	held := s.reqBytes[principal]
	if held > 0 && held+n > limit {
		return 0, false
	}
	s.reqBytes[principal] = held + n
	return n, true
}

// HoldRequest counts a request of m by principal, made through another
// route of the same server (the HTTP API's POST /v1/requests), toward
// MaxRequestBytesPerPrincipal, shared with the principal's WebSocket
// requests. It refuses RATE_LIMITED beyond the bound; otherwise release
// gives the count back once the request no longer waits (call it once).
// Its refusal is not audited here: it is the caller's to audit, which
// knows its route, its request's context and the contract (as
// publish.denied RATE_LIMITED, as a WebSocket request refused by the
// bound is audited, Ref "ws request bytes").
func (s *Server) HoldRequest(principal string, m *pigeon.Message) (release func(), err error) {
	n, ok := s.holdRequest(principal, requestCost(m))
	if !ok {
		s.stats.rateLimited.Add(1)
		return nil, errRequestBytes()
	}
	return func() { s.releaseRequest(principal, n) }, nil
}

// errRequestBytes refuses a request beyond MaxRequestBytesPerPrincipal.
func errRequestBytes() error {
	return pigeon.NewError(pigeon.CodeRateLimited,
		"this principal's requests waiting for replies hold the most memory allowed (MaxRequestBytesPerPrincipal): wait for their replies")
}

// releaseRequest gives back n bytes holdRequest counted for principal.
func (s *Server) releaseRequest(principal string, n int64) {
	if n == 0 {
		return
	}
	s.reqMu.Lock()
	if s.reqBytes[principal] -= n; s.reqBytes[principal] <= 0 {
		delete(s.reqBytes, principal)
	}
	s.reqMu.Unlock()
}

// errServerShutdown is the error of every operation refused because the
// server (or, seen from the client, the server it talks to) is shutting
// down.
func errServerShutdown() *pigeon.Error {
	return pigeon.NewError(pigeon.CodeShutdown, "server is shutting down")
}
