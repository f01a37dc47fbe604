package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"pigeon"
	"pigeon/docs"
	"pigeon/internal/wire"
	"pigeon/policy"
)

// observabilityRoutes serves the operator's face: the console at /, its
// live events, audit verification, the API descriptions and, when set,
// the metrics.
func (s *Server) observabilityRoutes() {
	s.handle("GET /{$}", http.HandlerFunc(serveConsolePage))
	s.handle("GET /console/{file}", http.HandlerFunc(serveConsoleAsset))
	s.handle("GET /v1/console/events", http.HandlerFunc(s.consoleEvents))
	s.route("/v1/audit/verify", map[string]endpoint{http.MethodPost: {auditor, verifyAudit}})
	s.route("/v1/asyncapi", map[string]endpoint{http.MethodGet: {public, asyncAPI}})
	s.handle("GET /openapi.yaml", http.HandlerFunc(serveOpenAPI))
	s.handle("GET /docs", http.HandlerFunc(serveDocsPage))
	if s.opts.Metrics != nil {
		s.handle("GET /metrics", s.opts.Metrics)
	}
}

// MinBearerTokenLength is the shortest token RequireBearer accepts: 16
// bytes, 128 bits when they are random, beyond any guessing.
const MinBearerTokenLength = 16

// CheckBearerToken refuses a token RequireBearer could not compare: one
// shorter than MinBearerTokenLength, or holding a byte that is not
// printable ASCII (a space, a control character, UTF-8), which no
// Authorization header carries as sent.
func CheckBearerToken(token string) error {
	if len(token) < MinBearerTokenLength {
		return errors.New("the token is shorter than 16 bytes")
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c >= 0x7f {
			return errors.New("the token holds a byte that is not printable ASCII (a space, a control character, or non-ASCII text)")
		}
	}
	return nil
}

// RequireBearer returns h behind a bearer token of its own: a request is
// served only when its one Authorization header is "Bearer " and token,
// compared in constant time (by SHA-256 digest, so that neither the
// length nor a common prefix is learnt from the time a refusal takes).
// Any other request is answered 401 UNAUTHENTICATED, with
// WWW-Authenticate: Bearer, and h never runs. A token that
// CheckBearerToken refuses (an empty one, say) refuses every request.
//
// It is for the Prometheus metrics (Options.Metrics, or a listener of
// their own), whose scraper holds no account of the engine: its scrape
// configuration carries the token (authorization.credentials_file).
func RequireBearer(token string, h http.Handler) http.Handler {
	valid := CheckBearerToken(token) == nil
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(bearer(r)))
		if !valid || len(r.Header["Authorization"]) != 1 || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			writeError(w, pigeon.NewError(pigeon.CodeUnauthenticated, "a valid bearer token is required"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// handle serves h at pattern ("METHOD /path") and lists the route.
func (s *Server) handle(pattern string, h http.Handler) {
	s.routeList = append(s.routeList, pattern)
	s.mux.Handle(pattern, h)
}

// Routes lists every route the server answers, as "METHOD /path" with
// path parameters in braces (the OpenAPI form), sorted. Handlers added with
// Mount are not listed.
func (s *Server) Routes() []string {
	out := slices.Clone(s.routeList)
	for i, r := range out {
		out[i] = strings.TrimSuffix(r, "{$}")
	}
	slices.Sort(out)
	return out
}

func verifyAudit(rq *request) (int, any, error) {
	rq.reread = true // a walk of the whole log, or a wait for one
	n, err := rq.s.e.VerifyAudit(rq.ctx)
	res := pigeon.VerifyResult{Time: time.Now().UTC(), OK: err == nil, Verified: n}
	if err != nil {
		if pigeon.ErrorCode(err) != pigeon.CodeAuditTampered {
			return 0, nil, err
		}
		res.Error = err.Error()
	}
	return http.StatusOK, res, nil
}

// asyncAPI exports the current catalog as an AsyncAPI 3 document.
func asyncAPI(rq *request) (int, any, error) {
	doc, err := rq.s.asyncAPIDoc()
	if err != nil {
		return 0, nil, pigeon.WrapError(pigeon.CodeInternal, err, "asyncapi export")
	}
	return http.StatusOK, doc, nil
}

// renderedDoc is a document rendered from the catalog of one generation
// (pigeon.Engine.CatalogGeneration).
type renderedDoc struct {
	gen  uint64
	body []byte // never changed once stored: answers share it
}

// asyncAPIDoc is the AsyncAPI document of the current catalog, compact
// JSON, rendered once per catalog generation: rendering copies the
// catalog, parses every schema and encodes the whole document, hundreds
// of microseconds for a small catalog. The document is the same for
// every caller (the route is public and reads the catalog alone, never
// the principal or the region), so one copy serves all. Requests that
// find it stale render it once, one after the other; a rendering that
// fails is not kept.
func (s *Server) asyncAPIDoc() ([]byte, error) {
	if d := s.asyncAPI.Load(); d != nil && d.gen == s.e.CatalogGeneration() {
		return d.body, nil
	}
	s.asyncAPIMu.Lock()
	defer s.asyncAPIMu.Unlock()
	gen := s.e.CatalogGeneration() // before Catalog: the document is at least as new
	if d := s.asyncAPI.Load(); d != nil && d.gen == gen {
		return d.body, nil
	}
	doc, err := policy.AsyncAPI(s.e.Catalog(), policy.AsyncAPIInfo{Title: "Pigeon catalog", Version: "current"})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, doc); err != nil {
		return nil, err
	}
	s.asyncAPI.Store(&renderedDoc{gen: gen, body: b.Bytes()})
	return b.Bytes(), nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(docs.OpenAPI())
}

// consoleContext is the principal of a console request that may read the
// live events: an auditor. Others are answered and get nil.
func (s *Server) consoleContext(w http.ResponseWriter, r *http.Request) *pigeon.Principal {
	p, _, err := s.authenticate(r)
	if err != nil {
		unauthorized(w, err)
		return nil
	}
	if !p.HasRole(RoleAuditor) {
		writeError(w, s.denied(r, p, pigeon.NewError(pigeon.CodeForbidden, "the console's live events require the role %s", RoleAuditor)))
		return nil
	}
	return p
}

// Console stream cadence and bounds: every tick sends at most
// consoleBatch decisions (the newest, with the count of those left out),
// so a flood of decisions costs the page a few hundred rows a second and
// the server nothing beyond the Feed's ring.
const (
	consoleTick  = 250 * time.Millisecond
	consoleBatch = 100
	consoleState = 4 // ticks between state and rate events
	// consoleBacklog is how many recent decisions a new stream starts with.
	consoleBacklog = 50
)

// consoleEvents streams the console's live data as server-sent events:
// hello (who signed in), decisions (batches from the Feed), rates (per
// subject) and state (groups, quarantine, audit head). The stream ends
// when the client goes or the server shuts down; the page reconnects.
func (s *Server) consoleEvents(w http.ResponseWriter, r *http.Request) {
	p := s.consoleContext(w, r)
	if p == nil {
		return
	}
	if !s.holdConsoleStream(p.ID) {
		s.boundDenied(r, p, pigeon.EventAccessDenied, boundConsoleStreams, pigeon.AuditRecord{})
		writeError(w, pigeon.NewError(pigeon.CodeRateLimited,
			"this principal holds the most console streams it may (%d): close a console first", s.opts.MaxConsoleStreamsPerPrincipal))
		return
	}
	defer s.dropConsoleStream(p.ID)
	rc := http.NewResponseController(w)
	// The request is read: the server's read timeout must not end the
	// stream (net/http cancels a request whose connection read times out).
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write([]byte("event: " + event + "\ndata: ")); err != nil {
			return false
		}
		if _, err := w.Write(append(b, '\n', '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("hello", map[string]any{"principal": p.ID, "roles": p.Roles, "feed": s.opts.Feed != nil}) {
		return
	}
	// still reports whether the stream may go on: whether its credential
	// still authenticates (pigeon.Engine.Reauthenticate) and its principal
	// still holds the auditor role. Asked before every tick's events, so
	// that a revocation ends the stream within a tick, with an end event
	// that says why, rather than when the page goes.
	cred := wire.Credential(r, bearer(r))
	still := func() bool {
		q, err := s.e.Reauthenticate(r.Context(), cred)
		if err == nil && !q.HasRole(RoleAuditor) {
			err = s.denied(r, q, pigeon.NewError(pigeon.CodeForbidden,
				"the console's live events require the role %s, which this principal no longer holds", RoleAuditor))
		}
		if err != nil {
			send("end", map[string]any{"error": wire.Encode(err)})
			return false
		}
		return true
	}
	var cursor uint64
	if f := s.opts.Feed; f != nil {
		_, total, _ := f.Since(0, 0)
		cursor = total - min(total, consoleBacklog)
	}
	t := time.NewTicker(consoleTick)
	defer t.Stop()
	// Each tick sends the snapshots that are due (rates, then state) before
	// the decisions made since the last one, so a new stream always starts
	// with the page's whole state, whatever the backlog holds.
	for tick := 0; ; tick++ {
		if tick > 0 && !still() {
			return
		}
		f := s.opts.Feed
		if tick%consoleState == 0 {
			if f != nil && !send("rates", map[string]any{"subjects": f.Rates(), "time": time.Now().UTC()}) {
				return
			}
			// The state is read from the store, which may wait (up to
			// two seconds): the credential is checked again before what
			// the read returned goes out.
			if !s.sendState(r.Context(), func(event string, v any) bool { return still() && send(event, v) }) {
				return
			}
		}
		if f != nil {
			ds, next, skipped := f.Since(cursor, consoleBatch)
			cursor = next
			if len(ds) > 0 || skipped > 0 {
				if !send("decisions", map[string]any{"decisions": ds, "skipped": skipped}) {
					return
				}
			}
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		}
	}
}

// holdConsoleStream counts a console stream of principal, and reports
// false, counting nothing, when it already holds
// MaxConsoleStreamsPerPrincipal of them.
func (s *Server) holdConsoleStream(principal string) bool {
	s.consoleMu.Lock()
	defer s.consoleMu.Unlock()
	if limit := s.opts.MaxConsoleStreamsPerPrincipal; limit >= 0 && s.consoleStreams[principal] >= limit {
		return false
	}
	s.consoleStreams[principal]++
	return true
}

// dropConsoleStream uncounts a stream holdConsoleStream counted.
func (s *Server) dropConsoleStream(principal string) {
	s.consoleMu.Lock()
	defer s.consoleMu.Unlock()
	if s.consoleStreams[principal]--; s.consoleStreams[principal] <= 0 {
		delete(s.consoleStreams, principal)
	}
}

// statsTTL is how long the console streams share one reading of the
// engine's state (it lists the quarantine and the live contracts): many
// open consoles cost one reading a second.
const statsTTL = time.Second

// consoleContracts is how many live contracts the console lists (the
// newest; the total is sent beside them).
const consoleContracts = pigeon.DefaultLiveContracts

// consoleReading is one reading of the engine's state for the console.
type consoleReading struct {
	st             pigeon.Stats
	contracts      []pigeon.LiveContract
	contractsTotal int
}

// state returns the engine's state, read at most once per statsTTL for all
// the console streams.
func (s *Server) state(ctx context.Context) (consoleReading, error) {
	c := &s.statsCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || c.at.IsZero() || time.Since(c.at) >= statsTTL {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c.r.st, c.err = s.e.Stats(ctx)
		if c.err == nil {
			c.r.contracts, c.r.contractsTotal, c.err = s.e.LiveContracts(ctx, consoleContracts)
		}
		c.at = time.Now()
	}
	return c.r, c.err
}

// sendState sends the engine's state; a failure to read it is sent as
// the state's error, not as the end of the stream.
func (s *Server) sendState(ctx context.Context, send func(string, any) bool) bool {
	cs, err := s.state(ctx)
	st := cs.st
	body := map[string]any{"auditRecords": st.AuditRecords, "quarantineOpen": st.QuarantineOpen,
		"groups": st.Groups, "subscriptions": st.Subscriptions, "contracts": st.Contracts, "lastVerify": st.LastVerify,
		"connections": s.ws.Stats().Open, "liveContracts": cs.contracts, "liveContractsTotal": cs.contractsTotal,
		"subjects": st.Subjects}
	if st.Groups == nil {
		body["groups"] = []pigeon.GroupStats{}
	}
	if st.Subjects == nil {
		body["subjects"] = []pigeon.SubjectStats{}
	}
	if cs.contracts == nil {
		body["liveContracts"] = []pigeon.LiveContract{}
	}
	if err != nil {
		body["error"] = pigeon.ErrorCode(err)
	}
	return send("state", body)
}
