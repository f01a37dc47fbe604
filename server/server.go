package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/internal/logctx"
	"pigeon/internal/readpool"
	"pigeon/programs"
	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

// Defaults of Options.
const (
	DefaultRegion            = "uk"
	DefaultMaxBody           = 1 << 20
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConnections    = 16384
	// DefaultMaxHeaderBytes is Options.MaxHeaderBytes's default: four
	// times the largest bearer token an identity provider's issuer is
	// read from (16 KiB), twice what common reverse proxies pass on.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConsoleStreamsPerPrincipal is
	// Options.MaxConsoleStreamsPerPrincipal's default.
	DefaultMaxConsoleStreamsPerPrincipal = 16
)

// Options configure a Server. A nil *Options means the defaults; New copies
// the value and never changes the caller's.
type Options struct {
	// Region is a request's region when it sends no x-pigeon-region header
	// (default "uk", as the reference broker). It is also the WebSocket
	// default unless WebSocket.Region says otherwise.
	Region string
	// MaxBody bounds a request body (default 1 MiB); a larger one is
	// answered 413 PAYLOAD_TOO_LARGE.
	MaxBody int64
	// WebSocket configures the endpoint at /v1/ws.
	WebSocket *ws.Options
	// AllowedOrigins lists the origins (host patterns such as
	// app.example.com or *.example.com:8443, or scheme://host patterns)
	// whose browser pages may call the API besides the server's own: their
	// calls get CORS headers and their preflights an answer, and they may
	// open /v1/ws (added to WebSocket.OriginPatterns). A browser's request
	// for a page of any other origin (but a navigation to a page of the
	// server) is refused 403 FORBIDDEN before its credential is looked
	// at: a form or a no-cors fetch needs no preflight and carries the
	// browser's client certificate, and a request without a credential
	// counts toward the lockout of the browser's address.
	AllowedOrigins []string
	// AllowedHosts, when not empty, are the host names the server answers
	// to (a request's Host, its port aside), as patterns in the syntax of
	// AllowedOrigins (path.Match, any case): localhost, or *.example.com
	// for the subdomains of example.com; a request naming an
	// IP address is always answered. A request for any other name is
	// refused 403 FORBIDDEN before its credential is looked at: a DNS
	// rebinding page (a page of the attacker's name, its address then made
	// the server's) is of the same origin as the server in the browser's
	// eyes, so neither CORS nor the cross-site refusal stops its script
	// from sending a bearer token it knows (the demo's are public). Empty:
	// any name (`pigeon serve` on a loopback address: LoopbackHosts).
	AllowedHosts []string
	// Timeouts of the HTTP server that Serve runs (see http.Server). A
	// WebSocket connection is not bound by them once upgraded.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds the size of a request's header lines, the
	// request line included, in the HTTP server Serve runs (default
	// DefaultMaxHeaderBytes; negative: net/http's own bound, 1 MiB). A
	// request beyond it is answered 431 and closed before any handler
	// runs. Each connection holds what it
	// has sent of its header until the header ends or ReadHeaderTimeout
	// passes, so the memory a slow sender's headers hold is about
	// MaxConnections × MaxHeaderBytes: at net/http's 1 MiB and the
	// default 16,384 connections, 16 GiB; at 64 KiB, 1 GiB.
	MaxHeaderBytes int
	// MaxConnections caps the connections Serve holds open at once, over
	// all its listeners, WebSocket connections included (default
	// DefaultMaxConnections; negative: no cap). A connection beyond it is
	// answered 429 RATE_LIMITED and closed (closed alone over TLS), and
	// accepting goes on: without a cap, clients that open connections and
	// send nothing, or keep them idle, could take every file descriptor
	// the process has, its store's included. Keep it below the process's
	// open-file limit.
	MaxConnections int
	// MaxConnectionsPerIP caps the connections of one source: a remote
	// IPv4 address, or a remote IPv6 /64, which a host given a /64 could
	// otherwise rotate through (0 or negative: no cap, the default, since
	// a proxy or NAT puts many clients behind one address). Beyond it a
	// connection is refused as beyond MaxConnections. A TCP peer in
	// TrustedProxies is not capped by it: the clients behind a proxy are
	// many sources, known only from the X-Forwarded-For of each request,
	// after the connection is accepted; its connections still count
	// toward MaxConnections. Cap the clients of a proxy at the proxy.
	// The /64s of one IPv6 site together hold at most a multiple of it
	// (ConnectionSite; by default each /48, 16 × it: a /48 holder could
	// otherwise dial from 65,536 /64s).
	MaxConnectionsPerIP int
	// ConnectionSite is how the /64s of one IPv6 site count together
	// under MaxConnectionsPerIP (default: each /48, at 16 × it; Bits
	// negative: not at all, each /64 alone). Serve refuses to start with
	// one that is not valid (pigeon.SiteLimit.Check).
	ConnectionSite pigeon.SiteLimit
	// MaxConsoleStreamsPerPrincipal caps the console's live streams (GET
	// /v1/console/events) one principal holds open at once (default
	// DefaultMaxConsoleStreamsPerPrincipal, one per browser tab; negative:
	// no cap). A stream is held for as long as its reader likes, so without
	// it one auditor's token could hold every connection MaxConnections
	// allows and lock every other client out. A stream beyond it is
	// refused 429 RATE_LIMITED and audited (access.denied, Ref "GET
	// /v1/console/events console streams per principal").
	MaxConsoleStreamsPerPrincipal int
	// TrustedProxies lists the networks of the reverse proxies and load balancers in front of the server. A
	// request whose TCP peer is in one of them is taken to come from the
	// last address of its X-Forwarded-For headers that is not a trusted
	// proxy's: that address is the client's for the per-source lockout
	// of refused credentials (pigeon.Options.AuthFailureLimit), the
	// auth.failed records, pigeon.Credential.RemoteAddr and the logs.
	// Without it X-Forwarded-For is ignored, and every client behind a
	// proxy shares the proxy's address: one client guessing, or polling
	// with an expired token, locks them all out. A trusted proxy is
	// exempt from MaxConnectionsPerIP, and is never refused at accept for
	// a lockout of its own address (see Serve). ParseTrustedProxies reads
	// them from text.
	TrustedProxies []netip.Prefix
	// MaxReadBytesInFlight bounds the memory the reads of the API (pull
	// receive, replay, the quarantine's and the audit log's pages, the pages of
	// accounts, roles and programs) hold at once, from the store read until the
	// answer is written (default DefaultMaxReadBytesInFlight; negative: no
	// bound). Each read reserves twice the engine's MaxReadBytes before it
	// reads and keeps about what its answer holds. Without it, clients
	// asking for large answers and reading them slowly could keep a
	// multiple of MaxReadBytes per connection in memory for up to
	// WriteTimeout each. A read that finds no room waits up to two seconds
	// and is then refused 429 RATE_LIMITED before anything is read, and
	// audited (receive.denied, replay.denied, or access.denied for a page
	// of the audit log, of the quarantine or of receipts; Ref "<route>
	// read budget"). The WebSocket endpoint keeps a pool of its own, of
	// this size unless WebSocket.MaxReadBytesInFlight says otherwise.
	MaxReadBytesInFlight int64
	// MaxReadBytesPerPrincipal bounds the part of MaxReadBytesInFlight
	// the reads of one principal (of one source, for a caller without
	// one) hold at once (default a quarter of it; negative: no share, the
	// whole pool), never less than one read's reservation, so that a
	// single read still runs. A read that would take its principal past
	// it waits aside, taking no place in the line, until that principal's
	// own reads give room back, and is then refused 429 RATE_LIMITED as
	// above: one client reading slowly cannot take the whole pool and lock
	// the others' reads out. The WebSocket endpoint's pool has a share of
	// this size unless WebSocket.MaxReadBytesPerPrincipal says otherwise.
	MaxReadBytesPerPrincipal int64
	// Logger receives operational events; never payload values. Default:
	// discard.
	Logger *slog.Logger
	// Mesgd, when set, serves mesgd's WebSocket format at /mesgd/<route
	// path> on Mesgd.Subject (package transport/mesgd).
	Mesgd *mesgd.Options
	// Programs, when set, serves /v1/programs (docs/programs.md) with it.
	// The server does not close it.
	Programs *programs.Manager
	// MaxProgramBody bounds a program deploy's body (default
	// DefaultMaxProgramBody).
	MaxProgramBody int64
	// TLS, when set, makes Serve speak HTTPS (and WSS): the listener is
	// wrapped with it. The client certificates of a connection reach the
	// Authenticator in pigeon.Credential.PeerCertificates. Not copied:
	// its callbacks (certificate reload) are the caller's.
	TLS *tls.Config
	// Metrics, when set, is served at GET /metrics as it is: without
	// authentication unless it is wrapped with RequireBearer
	// (promhttp.HandlerFor over the registry of package metrics). Leave it
	// nil to serve metrics on a listener of their own.
	Metrics http.Handler
	// Feed, when set, is the source of the console's live decisions and
	// rates; the engine must have it as (one of) its Observer. Without it
	// the console shows state, quarantine and contracts, but no stream.
	Feed *Feed
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.MaxBody <= 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxProgramBody <= 0 {
		c.MaxProgramBody = DefaultMaxProgramBody
	}
	if c.ReadHeaderTimeout <= 0 {
		c.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.ConnectionSite.Bits == 0 {
		c.ConnectionSite.Bits = pigeon.DefaultSiteBits
	}
	if c.ConnectionSite.Factor == 0 {
		c.ConnectionSite.Factor = pigeon.DefaultSiteFactor
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.MaxConsoleStreamsPerPrincipal == 0 {
		c.MaxConsoleStreamsPerPrincipal = DefaultMaxConsoleStreamsPerPrincipal
	}
	if c.MaxReadBytesInFlight == 0 {
		c.MaxReadBytesInFlight = DefaultMaxReadBytesInFlight
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Logger = slog.New(logctx.Handler(c.Logger.Handler())) // request ids on every line
	var wo ws.Options
	if o != nil && o.WebSocket != nil {
		wo = *o.WebSocket
	}
	if wo.Region == "" {
		wo.Region = c.Region
	}
	if wo.Logger == nil {
		wo.Logger = c.Logger
	}
	if wo.MaxReadBytesInFlight == 0 {
		wo.MaxReadBytesInFlight = c.MaxReadBytesInFlight
	}
	if wo.MaxReadBytesPerPrincipal == 0 {
		wo.MaxReadBytesPerPrincipal = c.MaxReadBytesPerPrincipal
	}
	c.AllowedOrigins = append([]string(nil), c.AllowedOrigins...)
	c.AllowedHosts = append([]string(nil), c.AllowedHosts...)
	c.TrustedProxies = append([]netip.Prefix(nil), c.TrustedProxies...)
	wo.OriginPatterns = append(append([]string(nil), wo.OriginPatterns...), c.AllowedOrigins...)
	c.WebSocket = &wo
	return c
}

// Server is the standalone broker's HTTP face: the pigeonmq-compatible API
// of docs/http.md, the WebSocket endpoint at /v1/ws, and the application
// handlers mounted behind the same authentication. It is an http.Handler,
// safe for concurrent use; Serve runs it on a listener with timeouts.
type Server struct {
	e     *pigeon.Engine
	opts  Options
	mux   *http.ServeMux
	ws    *ws.Server
	mesgd *mesgd.Server  // nil unless Options.Mesgd
	conns *connLimit     // the connections Serve holds, in all and per address
	reads *readpool.Pool // the memory the API's reads hold
	// proxies are Options.TrustedProxies: requests from them come from
	// the client X-Forwarded-For names (fromClient).
	proxies trustedProxies

	// idPrefix and requests make request ids: unique in this process,
	// unlikely to repeat across restarts.
	idPrefix string
	requests atomic.Uint64
	// routeList is every route served, "METHOD /pattern" (Routes).
	routeList []string
	// stopping is closed when Shutdown begins: streams (the console's
	// events) end so that the HTTP servers can finish.
	stopping chan struct{}
	// asyncAPI is the last /v1/asyncapi document rendered (asyncAPIDoc);
	// asyncAPIMu is held while one is rendered.
	asyncAPI   atomic.Pointer[renderedDoc]
	asyncAPIMu sync.Mutex
	// consoleStreams counts each principal's open console streams
	// (MaxConsoleStreamsPerPrincipal), under consoleMu; absent at 0.
	consoleMu      sync.Mutex
	consoleStreams map[string]int
	// logWalks holds a token for each walk of the whole audit log a
	// request makes (receipts), maxLogWalks at most.
	logWalks chan struct{}
	// walkers are the principals walking the audit log now (walkLog),
	// under walkMu.
	walkMu  sync.Mutex
	walkers map[string]bool
	// statsCache is the engine's state as the console streams last read it.
	statsCache struct {
		mu  sync.Mutex
		at  time.Time
		r   consoleReading
		err error
	}

	mu       sync.Mutex
	hs       []*http.Server
	closing  bool
	shutOnce sync.Once
	shutErr  error
}

// New returns the server of e.
func New(e *pigeon.Engine, opts *Options) *Server {
	o := opts.withDefaults()
	s := &Server{e: e, opts: o, mux: http.NewServeMux(), ws: ws.NewServer(e, o.WebSocket), stopping: make(chan struct{}),
		logWalks: make(chan struct{}, maxLogWalks), walkers: map[string]bool{},
		consoleStreams: map[string]int{}, idPrefix: strconv.FormatUint(rand.Uint64()%(36*36*36*36*36*36), 36) + "-"}
	s.proxies = trustedProxies(o.TrustedProxies)
	s.conns = newConnLimitSite(o.MaxConnections, o.MaxConnectionsPerIP, o.ConnectionSite, o.TLS != nil, o.Logger, s.proxies, e.LockedOut)
	s.reads = readpool.ForEngine(e, o.MaxReadBytesInFlight, o.MaxReadBytesPerPrincipal, readWait, o.Logger)
	if o.Mesgd != nil {
		mo := *o.Mesgd
		if mo.Logger == nil {
			mo.Logger = o.Logger
		}
		s.mesgd = mesgd.New(e, mo)
	}
	s.routes()
	return s
}

// WebSocket returns the WebSocket endpoint (for its Stats).
func (s *Server) WebSocket() *ws.Server { return s.ws }

// Mesgd returns the mesgd endpoint (for its Stats), nil unless
// Options.Mesgd.
func (s *Server) Mesgd() *mesgd.Server { return s.mesgd }

// Reauthenticate checks again the credential of every open WebSocket
// connection, on /v1/ws and /mesgd (ws.Server.Reauthenticate,
// mesgd.Server.Reauthenticate), as the engine judges it now: call it once
// what the authenticator accepts has narrowed (the client CAs reloaded, a
// token withdrawn). Each connection whose credential is refused now has
// its contracts revoked and is closed with 1008 UNAUTHENTICATED; the
// others are left alone. Plain HTTP requests need nothing of it: each is
// authenticated on its own. It returns how many connections it ended, and
// the checks that could not be made, joined.
func (s *Server) Reauthenticate(ctx context.Context) (ended int, err error) {
	ended, err = s.ws.Reauthenticate(ctx)
	if s.mesgd != nil {
		n, merr := s.mesgd.Reauthenticate(ctx)
		ended += n
		err = errors.Join(err, merr)
	}
	return ended, err
}

// ServeHTTP routes a request. A path that is not in canonical form (a
// doubled slash, a "." or ".." segment, a percent-escape of an unreserved
// character such as /v1/%61udit) is answered 404 NOT_FOUND with the usual
// JSON error body: http.ServeMux would redirect it, with an HTML body, to a
// route the client did not name, or serve it as a route a proxy in front
// took for another. (mesgd's route paths are its own: an escaped "." there
// is a member name's, not a separator.)
//
// A request that can be logged gets an id: the client's X-Request-Id when
// it is a short token (letters, digits, "-", "_", "."), otherwise one the
// server draws. It is answered in X-Request-Id and is the request_id of
// every log line written for the request (and, for a WebSocket, for the
// whole connection). A request can be logged when the Logger is enabled at
// slog.LevelDebug, when it upgrades to a WebSocket, or when the client
// sent an id; other requests write no line, and skip the cost.
//
// With a Logger enabled at slog.LevelDebug, every request is logged when
// its answer is written: method, path, status, bytes and duration (never a
// header, a query or a body).
//
// A handler that panics (the engine's, a custom store's under it, a
// mounted one) ends its request alone: the panic is logged with its
// stack, card numbers redacted, and the request answered 500 INTERNAL
// with the usual error body, or cut when its answer had already started,
// or its connection closed when it had been hijacked (see survive).
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	aw := &answerWriter{ResponseWriter: rw}
	var w http.ResponseWriter = aw
	debug := false
	var start time.Time
	defer func() {
		// Recovered here, a panic of any handler is logged redacted and
		// answered INTERNAL when it still can be (survive); the request's
		// line is logged after, with the status answered.
		abort := false
		if p := recover(); p != nil {
			abort = s.survive(aw, r, p)
		}
		if debug {
			s.opts.Logger.DebugContext(r.Context(), "http request", "method", r.Method, "path", r.URL.EscapedPath(), "status", aw.statusCode(),
				"bytes", aw.n, "duration", time.Since(start), "remote", r.RemoteAddr)
		}
		if abort {
			panic(http.ErrAbortHandler)
		}
	}()
	r = s.fromClient(r)
	debug = s.opts.Logger.Enabled(r.Context(), slog.LevelDebug)
	if debug || len(r.Header["X-Request-Id"]) > 0 || len(r.Header["Upgrade"]) > 0 {
		id := s.requestID(r)
		w.Header()["X-Request-Id"] = []string{id}
		r = r.WithContext(logctx.With(r.Context(), id))
	}
	if debug {
		start = time.Now()
	}
	if !hostAllowed(r.Host, s.opts.AllowedHosts) {
		writeError(w, pigeon.NewError(pigeon.CodeForbidden,
			"the server does not answer to this host name: the server's allowed hosts (pigeon serve --allowed-hosts) do not name it"))
		return
	}
	if s.cors(w, r) {
		return
	}
	if s.crossSite(r) {
		// Before the credential is looked at: an ambient one (a client
		// certificate) acts for nobody, and a credential-less request
		// counts toward no lockout of the browser's address.
		writeError(w, pigeon.NewError(pigeon.CodeForbidden,
			"a page of another origin may not call the API: the server's allowed origins (pigeon serve --allowed-origins) do not name its origin"))
		return
	}
	if r.Method != http.MethodConnect {
		if p := r.URL.EscapedPath(); canonicalPath(p) != p || escapesUnreserved(p) && !s.upgradesHere(p) {
			writeError(w, pigeon.NewError(pigeon.CodeNotFound, "no such route: the path is not in canonical form"))
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// requestID is the client's X-Request-Id when it is a short token, else
// the server's prefix and the request's number.
func (s *Server) requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); v != "" && len(v) <= 64 && strings.IndexFunc(v, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.')
	}) < 0 {
		return v
	}
	return s.idPrefix + strconv.FormatUint(s.requests.Add(1), 36)
}

// canonicalPath is p as http.ServeMux cleans it before routing: rooted,
// without doubled slashes or "." and ".." segments, keeping a trailing
// slash.
func canonicalPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// escapesUnreserved reports whether the escaped path p holds a
// percent-escape of an unreserved character (a letter, a digit, "-", ".",
// "_", "~"), which RFC 3986 (6.2.2.2) makes the same URI as the character
// itself: /v1/%61udit is /v1/audit. Such a path is not in canonical form:
// routed, it would be served as a route that a proxy or a firewall in
// front, matching the path as sent, took for another.
func escapesUnreserved(p string) bool {
	for i := strings.IndexByte(p, '%'); i >= 0 && i+2 < len(p); {
		if c, ok := unhex2(p[i+1], p[i+2]); ok && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~') {
			return true
		}
		j := strings.IndexByte(p[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// unhex2 is the byte the hex digits a and b spell.
func unhex2(a, b byte) (byte, bool) {
	h, ok1 := unhex(a)
	l, ok2 := unhex(b)
	return h<<4 | l, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Mount serves h at pattern (an http.ServeMux pattern, such as "/app/" or
// "POST /app/orders") behind the server's authentication: a request
// without a valid bearer token is answered 401, and h finds the
// authenticated principal with PrincipalFrom. It fails when pattern is
// invalid or conflicts with a route already served.
func (s *Server) Mount(pattern string, h http.Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("server: mount %q: %v", pattern, p)
		}
	}()
	s.mux.Handle(pattern, s.authenticated(h))
	return nil
}

// Serve accepts HTTP connections on l until Shutdown, with the timeouts
// and connection limits of Options, over TLS when Options.TLS is set. It
// returns http.ErrServerClosed after Shutdown.
//
// A connection whose TCP peer is a source locked out for refused
// credentials (pigeon.Engine.LockedOut) is refused as it is accepted,
// before any TLS handshake or HTTP parsing: closed over TLS, answered
// 429 RATE_LIMITED with the lockout's Retry-After and closed over plain
// HTTP (as a connection beyond MaxConnections is), so a guesser's
// connections cost the server no handshake while it is locked out. A peer
// in Options.TrustedProxies is never refused so: its requests name their
// clients, and the API refuses the locked-out ones. ConnStats counts
// these refusals; one warning a minute is logged while they come.
//
// Serve returns an error at once, without accepting, when
// Options.ConnectionSite is not valid.
func (s *Server) Serve(l net.Listener) error {
	if err := s.opts.ConnectionSite.Check(); err != nil {
		_ = l.Close()
		return fmt.Errorf("server: Options.ConnectionSite: %w", err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: s.opts.ReadHeaderTimeout, ReadTimeout: s.opts.ReadTimeout,
		WriteTimeout: s.opts.WriteTimeout, IdleTimeout: s.opts.IdleTimeout, MaxHeaderBytes: max(s.opts.MaxHeaderBytes, 0),
		ErrorLog: slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelDebug)}
	if s.opts.Logger.Enabled(context.Background(), slog.LevelDebug) {
		hs.ConnState = func(c net.Conn, st http.ConnState) {
			if st == http.StateNew || st == http.StateClosed || st == http.StateHijacked {
				s.opts.Logger.Debug("http connection", "state", st.String(), "remote", c.RemoteAddr().String())
			}
		}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = l.Close()
		return http.ErrServerClosed
	}
	s.hs = append(s.hs, hs)
	s.mu.Unlock()
	l = s.conns.wrap(l)
	if s.opts.TLS != nil {
		l = tls.NewListener(l, s.opts.TLS)
	}
	return hs.Serve(l)
}

// ListenAndServe listens on the TCP address addr and serves.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Shutdown stops accepting connections, lets every HTTP request in flight
// finish, closes every WebSocket connection gracefully (see
// ws.Server.Shutdown), and returns when all is done or ctx ends
// (ctx.Err()). It leaves the engine running: its owner shuts it down after.
// It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutOnce.Do(func() {
		close(s.stopping)
		s.mu.Lock()
		s.closing = true
		servers := s.hs
		s.mu.Unlock()
		var wg sync.WaitGroup
		errs := make([]error, len(servers)+2)
		for i, hs := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = hs.Shutdown(ctx)
			}()
		}
		errs[len(servers)] = s.ws.Shutdown(ctx)
		if s.mesgd != nil {
			errs[len(servers)+1] = s.mesgd.Shutdown(ctx)
		}
		wg.Wait()
		s.shutErr = errors.Join(errs...)
	})
	return s.shutErr
}
