package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"pigeon"
	"pigeon/internal/readpool"
	"pigeon/internal/wire"
	"pigeon/transport/mesgd"
)

// access is who may call an endpoint.
type access int

const (
	public   access = iota // anyone
	member                 // any authenticated principal
	auditor                // a principal with RoleAuditor
	admin                  // a principal with RoleAdmin
	self                   // the account the path's {id} names (not by a grant token), or a principal with RoleAdmin
	operator               // a principal with RoleAdmin or RolePrograms
)

// request is one API call being served.
type request struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	p      *pigeon.Principal
	region string
	held   int64        // bytes of Server.reads this request holds until answered
	reader readpool.Key // whom they are held for
	read   bool         // it reserved room in Server.reads, and may have waited for it
	// reread says that the answer is a read of the store that may have
	// waited (on the disk, a cluster's quorum) and, on a route under a
	// role, is checked again as a read of the pool is (stillMayCall).
	reread bool
	query  url.Values // the query string, read strictly (see queryParams)
}

// caller is who the request acts as, under the contract of the
// x-pigeon-contract header or the body's contractId, bodyContract. A
// request that names two different contracts is BAD_REQUEST: neither is
// taken over the other behind the caller's back.
func (rq *request) caller(bodyContract string) (pigeon.Caller, error) {
	id := rq.r.Header.Get("X-Pigeon-Contract")
	switch {
	case id == "":
		id = bodyContract
	case bodyContract != "" && bodyContract != id:
		return pigeon.Caller{}, pigeon.NewError(pigeon.CodeBadRequest,
			"the x-pigeon-contract header and the body's contractId name different contracts; send one, or the same in both")
	}
	return pigeon.Caller{Principal: rq.p, Region: rq.region, ContractID: id}, nil
}

// body reads and decodes the JSON object body into v.
func (rq *request) body(v any, required bool) error {
	b, err := readBody(rq.w, rq.r, rq.s.opts.MaxBody)
	if err != nil {
		return err
	}
	return decodeBody(b, v, required)
}

type endpoint struct {
	access access
	fn     func(rq *request) (int, any, error)
}

// route serves pattern (a path) with one endpoint per method. Another
// method is answered 405 with an Allow header.
func (s *Server) route(pattern string, methods map[string]endpoint) {
	allowed := make([]string, 0, len(methods))
	for m := range methods {
		allowed = append(allowed, m)
	}
	slices.Sort(allowed)
	for _, m := range allowed {
		s.routeList = append(s.routeList, m+" "+pattern)
	}
	allow := strings.Join(allowed, ", ")
	takes := make(map[string][]string, len(methods))
	for m := range methods {
		takes[m] = queryParams[m+" "+pattern]
	}
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		ep, ok := methods[r.Method]
		if !ok {
			w.Header().Set("Allow", allow)
			writeError(w, pigeon.NewError(pigeon.CodeMethodNotAllowed, "%s is not allowed here; allowed: %s", r.Method, allow))
			return
		}
		rq := &request{s: s, w: w, r: r, ctx: r.Context()}
		if ep.access != public {
			p, region, err := s.authenticate(r)
			if err != nil {
				unauthorized(w, err)
				return
			}
			if refused := mayCall(ep.access, p, r); refused != nil {
				writeError(w, s.denied(r, p, refused))
				return
			}
			rq.p, rq.region = p, region
		}
		q, err := parseQuery(r, takes[r.Method])
		if err != nil {
			writeError(w, err)
			return
		}
		rq.query = q
		defer rq.keepRead(0) // what a read still holds, once its answer is written
		status, body, err := ep.fn(rq)
		if err != nil {
			s.logStoreDamage(r, err)
			writeError(w, err)
			return
		}
		if (rq.read || rq.reread) && ep.access > member {
			if err := rq.stillMayCall(ep.access); err != nil {
				unauthorized(w, err)
				return
			}
		}
		writeJSON(w, status, body)
	})
}

// stillMayCall checks again, once a read that may have waited for room in
// the read pool, or on the store (request.reread: one quarantine record,
// a walk of the audit log), is done and before its answer is written, that the
// caller may call a route of access a: a grant revoked, an account
// deleted or a role taken away while the read waited holds for this read,
// not the next. (A read under a contract is checked again by the engine.)
func (rq *request) stillMayCall(a access) error {
	p, err := rq.s.e.Reauthenticate(rq.ctx, wire.Credential(rq.r, bearer(rq.r)))
	if err != nil {
		return err
	}
	if refused := mayCall(a, p, rq.r); refused != nil {
		return rq.s.denied(rq.r, p, refused)
	}
	return nil
}

// denied audits refused, the refusal of r to p for want of a role, as an
// access.denied record naming the operation ("DELETE /v1/grants/{jti}":
// the method and the route's pattern, never the path the caller chose),
// and returns it. The refusal stands whether or not its record is
// written; a run of them from one principal is coalesced.
func (s *Server) denied(r *http.Request, p *pigeon.Principal, refused *pigeon.Error) *pigeon.Error {
	_ = s.e.Record(r.Context(), pigeon.EventAccessDenied, refused.Code, pigeon.AuditRecord{Principal: p.ID, Ref: operation(r)})
	return refused
}

// operation names the operation r calls, for an audit record: its method
// and the pattern of the route that serves it ("DELETE /v1/grants/{jti}"),
// never the path the caller chose.
func operation(r *http.Request) string {
	op := r.Pattern
	if !strings.Contains(op, " ") { // a pattern without its method
		op = r.Method + " " + op
	}
	return op
}

// mayCall returns the refusal (403 FORBIDDEN) of r by p, an authenticated
// principal, on an endpoint of access a, or nil when p may call it.
func mayCall(a access, p *pigeon.Principal, r *http.Request) *pigeon.Error {
	switch {
	case a == auditor && !p.HasRole(RoleAuditor):
		return pigeon.NewError(pigeon.CodeForbidden, "this route requires the role %s", RoleAuditor)
	case a == admin && !p.HasRole(RoleAdmin):
		return pigeon.NewError(pigeon.CodeForbidden, "this route requires the role %s", RoleAdmin)
	case a == operator && !p.HasRole(RoleAdmin) && !p.HasRole(RolePrograms):
		return pigeon.NewError(pigeon.CodeForbidden, "this route requires the role %s or %s", RoleAdmin, RolePrograms)
	case a == self && (p.ID != r.PathValue("id") || p.Method == pigeon.AuthGrant) && !p.HasRole(RoleAdmin):
		// A grant token hands a program roles of the account, not the
		// account's keys, which sign and seal as the account.
		return pigeon.NewError(pigeon.CodeForbidden, "only the account itself (not a grant token of it) or an admin may call this route")
	}
	return nil
}

func (s *Server) routes() {
	get := func(a access, fn func(*request) (int, any, error)) map[string]endpoint {
		return map[string]endpoint{http.MethodGet: {a, fn}}
	}
	post := func(a access, fn func(*request) (int, any, error)) map[string]endpoint {
		return map[string]endpoint{http.MethodPost: {a, fn}}
	}
	s.route("/health", get(public, health))
	s.route("/v1/subjects", get(public, listSubjects))
	s.route("/v1/subjects/{name}", get(public, getSubject))
	s.route("/v1/subjects/{name}/receive", post(member, receive))
	s.route("/v1/subjects/{name}/ack", post(member, ack))
	s.route("/v1/subjects/{name}/nack", post(member, nack))
	s.route("/v1/subjects/{name}/replay", post(member, replay))
	s.route("/v1/contracts", post(member, negotiate))
	s.route("/v1/contracts/{id}/renew", post(member, renewContract))
	s.route("/v1/contracts/{id}", map[string]endpoint{http.MethodGet: {member, getContract}, http.MethodDelete: {member, revokeContract}})
	s.route("/v1/messages", post(member, publish))
	s.route("/v1/requests", post(member, requestReply))
	s.route("/v1/audit", get(auditor, audit))
	s.route("/v1/audit/receipts/{id}", get(auditor, receipts))
	s.route("/v1/quarantine", get(auditor, listQuarantine))
	s.route("/v1/quarantine/{id}", get(auditor, getQuarantine))
	s.route("/v1/quarantine/{id}/release", post(auditor, release))
	s.adminRoutes()
	s.programRoutes()
	s.observabilityRoutes()
	s.routeList = append(s.routeList, "GET /v1/ws")
	s.mux.HandleFunc("/v1/ws", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, pigeon.NewError(pigeon.CodeMethodNotAllowed, "%s is not allowed here; allowed: GET", r.Method))
			return
		}
		s.ws.ServeHTTP(w, r)
	})
	if s.mesgd != nil {
		s.routeList = append(s.routeList, "GET "+mesgd.Prefix+"/{route}")
		s.mux.HandleFunc("GET "+mesgd.Prefix+"/", s.mesgd.ServeHTTP)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, pigeon.NewError(pigeon.CodeNotFound, "no such route"))
	})
}

var healthBody = []byte(`{"ok":true,"service":"pigeon"}`)

func health(*request) (int, any, error) { return http.StatusOK, healthBody, nil }

func listSubjects(rq *request) (int, any, error) {
	subs := rq.s.e.Subjects()
	out := make([]subjectView, len(subs))
	for i, p := range subs {
		out[i] = viewSubject(p)
	}
	return http.StatusOK, map[string]any{"subjects": out}, nil
}

func getSubject(rq *request) (int, any, error) {
	p, err := rq.s.e.Subject(rq.r.PathValue("name"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"subject": viewSubject(p)}, nil
}

func negotiate(rq *request) (int, any, error) {
	var in struct {
		Subjects []string `json:"subjects"`
		TTLMs    int64    `json:"ttlMs"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	ttl, err := pigeon.TTLFromMillis(in.TTLMs)
	if err != nil {
		return 0, nil, err
	}
	k, err := rq.s.e.Negotiate(rq.ctx, rq.p, rq.region, in.Subjects, ttl)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, map[string]any{"contract": k.Info()}, nil
}

func getContract(rq *request) (int, any, error) {
	k, err := rq.s.e.GetContract(rq.ctx, rq.p, rq.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"contract": k.Info()}, nil
}

// renewContract moves a contract's expiry later (pigeon.Engine.RenewContract),
// for the body's ttlMs (absent or 0: the default lifetime).
func renewContract(rq *request) (int, any, error) {
	var in struct {
		TTLMs int64 `json:"ttlMs"`
	}
	if err := rq.body(&in, false); err != nil {
		return 0, nil, err
	}
	ttl, err := pigeon.TTLFromMillis(in.TTLMs)
	if err != nil {
		return 0, nil, err
	}
	k, err := rq.s.e.RenewContract(rq.ctx, rq.p, rq.r.PathValue("id"), ttl)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"contract": k.Info()}, nil
}

func revokeContract(rq *request) (int, any, error) {
	id := rq.r.PathValue("id")
	if err := rq.s.e.RevokeContract(rq.ctx, rq.p, id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"id": id, "revoked": true}, nil
}

// Acknowledgement modes of an HTTP receive.
const (
	// ackAuto settles every message a receive returns, as the reference
	// broker's pull does: a received message is done for that consumer.
	ackAuto = "auto"
	// ackExplicit leaves the messages leased for the subject's ack wait,
	// until the caller acks or nacks them (as over WebSocket).
	ackExplicit = "explicit"
)

func receive(rq *request) (int, any, error) {
	var in struct {
		Max        int    `json:"max"`
		ContractID string `json:"contractId"`
		Ack        string `json:"ack"`
	}
	if err := rq.body(&in, false); err != nil {
		return 0, nil, err
	}
	if in.Ack == "" {
		in.Ack = ackAuto
	}
	if in.Ack != ackAuto && in.Ack != ackExplicit {
		return 0, nil, pigeon.NewError(pigeon.CodeBadRequest, `ack must be "auto" (the default) or "explicit"`)
	}
	c, err := rq.caller(in.ContractID)
	if err != nil {
		return 0, nil, err
	}
	name := rq.r.PathValue("name")
	if err := rq.reserveRead(pigeon.EventReceiveDenied, c.ContractID, name); err != nil {
		return 0, nil, err
	}
	if in.Ack == ackExplicit {
		// Leased until acked or nacked: each lease's attempt is
		// answered, for the ack's or nack's "attempt".
		msgs, attempts, err := rq.s.e.ReceiveAttempts(rq.ctx, c, name, in.Max)
		rq.keepRead(readpool.MessagesCost(msgs))
		if err != nil {
			return 0, nil, err
		}
		if !slices.ContainsFunc(attempts, func(n int) bool { return n != 0 }) {
			return http.StatusOK, messagesBody(msgs), nil // pubsub: nothing leased
		}
		return http.StatusOK, struct {
			Messages []*pigeon.Message `json:"messages"`
			Attempts []int             `json:"attempts"`
		}{msgs, attempts}, nil
	}
	// A received message is done for this consumer.
	msgs, err := rq.s.e.ReceiveSettled(rq.ctx, c, name, in.Max)
	rq.keepRead(readpool.MessagesCost(msgs))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, messagesBody(msgs), nil
}

// settleBody is the body of an ack or a nack. Sequence, when not 0, is
// the sequence the message was received at: a message at another
// sequence that holds the id now (the one received was trimmed, its id
// taken) is not settled (ACK_NOT_ALLOWED); see Engine.AckSequence.
// Attempt, when not 0, is the lease attempt an explicit receive answered
// the message with: once that lease ran out and the message was leased
// again, even to the same principal, nothing is settled
// (ACK_NOT_ALLOWED); see Engine.AckAttempt.
type settleBody struct {
	MessageID  string `json:"messageId"`
	Sequence   uint64 `json:"sequence"`
	Attempt    int    `json:"attempt"`
	DelayMs    *int64 `json:"delayMs"`
	ContractID string `json:"contractId"`
}

// settleBody reads an ack's or a nack's body and the caller it acts as.
func (rq *request) settleBody() (settleBody, pigeon.Caller, error) {
	var in settleBody
	if err := rq.body(&in, true); err != nil {
		return in, pigeon.Caller{}, err
	}
	if in.MessageID == "" {
		return in, pigeon.Caller{}, pigeon.NewError(pigeon.CodeBadRequest, "messageId is required")
	}
	c, err := rq.caller(in.ContractID)
	return in, c, err
}

func ack(rq *request) (int, any, error) {
	in, c, err := rq.settleBody()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.s.e.AckAttempt(rq.ctx, c, rq.r.PathValue("name"), in.MessageID, in.Sequence, in.Attempt); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"ok": true, "messageId": in.MessageID}, nil
}

func nack(rq *request) (int, any, error) {
	in, c, err := rq.settleBody()
	if err != nil {
		return 0, nil, err
	}
	delay := time.Duration(-1) // the subject's backoff
	if in.DelayMs != nil {
		if delay, err = pigeon.RetryDelayMillis(*in.DelayMs); err != nil {
			return 0, nil, err
		}
	}
	if err := rq.s.e.NackAttempt(rq.ctx, c, rq.r.PathValue("name"), in.MessageID, in.Sequence, in.Attempt, delay); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"ok": true, "messageId": in.MessageID}, nil
}

func replay(rq *request) (int, any, error) {
	var in struct {
		Reason       string `json:"reason"`
		FromSequence uint64 `json:"fromSequence"`
		ToSequence   uint64 `json:"toSequence"`
		Max          int    `json:"max"`
		ContractID   string `json:"contractId"`
	}
	if err := rq.body(&in, false); err != nil {
		return 0, nil, err
	}
	c, err := rq.caller(in.ContractID)
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reserveRead(pigeon.EventReplayDenied, c.ContractID, rq.r.PathValue("name")); err != nil {
		return 0, nil, err
	}
	msgs, err := rq.s.e.Replay(rq.ctx, c, pigeon.ReplayRequest{Subject: rq.r.PathValue("name"),
		Reason: in.Reason, FromSequence: in.FromSequence, ToSequence: in.ToSequence, Max: in.Max})
	rq.keepRead(readpool.MessagesCost(msgs))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, messagesBody(msgs), nil
}

// maxRecords caps one page of a listing: audit or quarantine records,
// receipts, and the accounts, roles and programs (namePage).
const maxRecords = 10000

// maxPageBytes is the byte budget of one page of a listing by id or name
// (GET /v1/accounts, /v1/roles, /v1/programs; namedPage): the most its
// entries take in the answer's JSON, the commas between them included. A
// page of maxRecords entries would otherwise reach gigabytes: an account
// may hold 64 attributes of over a kilobyte each (about 400 KB in JSON),
// a program's entry a hundred manifests. 4 MiB holds about ten of the
// largest accounts and a full page of accounts of a few hundred bytes, and
// is small beside what a client reads of an answer (the CLI and the
// clients read 64 MiB or more). A variable for the tests.
var maxPageBytes = pigeon.MaxPageBytes

// pageSize reads ?max=, defaulting to and capped at maxRecords.
func (rq *request) pageSize() (int, error) {
	n, err := rq.queryInt("max")
	if err != nil {
		return 0, err
	}
	if n == 0 || n > maxRecords {
		n = maxRecords
	}
	return int(n), nil
}

// namePage reads the query of a listing by id or name (GET /v1/accounts,
// /v1/roles, /v1/programs): ?after=, the id the page starts after (""
// for the first page), and ?max= (pageSize: default and cap maxRecords).
func (rq *request) namePage() (after string, max int, err error) {
	max, err = rq.pageSize()
	return rq.query.Get("after"), max, err
}

// reservePage reserves room in the server's read pool (reserveRead) for a
// page of a listing by id or name (GET /v1/accounts, /v1/roles,
// /v1/programs), as a page of the audit log or of the quarantine reserves
// it: listings in flight at once hold at most the pool, each principal's
// at most its share, and one refused for want of room is RATE_LIMITED
// (429, Retry-After), audited access.denied ("GET /v1/accounts read
// budget"), before the listing is read.
func (rq *request) reservePage() error {
	return rq.reserveRead(pigeon.EventAccessDenied, "", "")
}

// keepPage keeps, of a listing's reservation, what its answer holds until
// written: the entries the page copied and body, their JSON.
func (rq *request) keepPage(entries int, body []byte) {
	rq.keepRead(readpool.Cost(entries, int64(len(body))))
}

// afterRefused is err, the refusal of a page of a listing by id or name,
// with INVALID_ARGUMENT (an ?after= that is not an id of the kind the
// listing holds, what: no page names one) answered as the query
// parameter's BAD_REQUEST, as a bad ?after= of receipts is.
func (rq *request) afterRefused(err error, what string) error {
	if pigeon.ErrorCode(err) != pigeon.CodeInvalidArgument {
		return err
	}
	return pigeon.NewError(pigeon.CodeBadRequest, "query parameter after must be a page's next, %s (%s)", what, quoteCut(rq.query.Get("after"), 64))
}

// namedPage is the answer of one page of a listing by id or name, the
// JSON body itself: entries, in their order, under key ("accounts") and,
// when more follow, "next", the ?after= of the page that follows; name
// is an entry's id or name. next is the page's as the listing found it
// (its last entry, or "" when none follows it), unless the page ends
// before its last entry at the byte budget: namedPage encodes the entries
// one by one, as writeJSON would (json.Marshal's encoding), and stops
// before the one that would take them past maxPageBytes; next is then the
// last entry it holds. The first entry is always held, however large, so
// that a client paging by next moves on, and gets every entry once.
// Each entry is encoded once, straight into the body (the one past the
// budget is encoded and dropped).
func namedPage[T any](key string, entries []T, next string, name func(*T) string) ([]byte, error) {
	var body bytes.Buffer
	body.WriteString(`{"` + key + `":[`)
	start := body.Len()
	enc := json.NewEncoder(&body) // json.Marshal's encoding, HTML escaped, then a newline
	for i := range entries {
		mark := body.Len()
		if i > 0 {
			body.WriteByte(',')
		}
		if err := enc.Encode(&entries[i]); err != nil {
			return nil, pigeon.WrapError(pigeon.CodeInternal, err, "encode response")
		}
		body.Truncate(body.Len() - 1) // the newline
		if i > 0 && body.Len()-start > maxPageBytes {
			body.Truncate(mark)
			next = name(&entries[i-1])
			break
		}
	}
	body.WriteByte(']')
	if next != "" {
		body.WriteString(`,"next":`)
		if err := enc.Encode(next); err != nil {
			return nil, pigeon.WrapError(pigeon.CodeInternal, err, "encode response")
		}
		body.Truncate(body.Len() - 1)
	}
	body.WriteByte('}')
	return body.Bytes(), nil
}

func audit(rq *request) (int, any, error) {
	from, err := rq.queryInt("from")
	if err != nil {
		return 0, nil, err
	}
	n, err := rq.pageSize()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reserveRead(pigeon.EventAccessDenied, "", ""); err != nil {
		return 0, nil, err
	}
	recs, err := rq.s.e.Audit(rq.ctx, from, n)
	rq.keepRead(auditCost(recs))
	if err != nil {
		return 0, nil, err
	}
	if recs == nil {
		recs = []pigeon.AuditRecord{}
	}
	return http.StatusOK, map[string]any{"records": recs}, nil
}

func listQuarantine(rq *request) (int, any, error) {
	since, err := rq.queryTime("since")
	if err != nil {
		return 0, nil, err
	}
	n, err := rq.pageSize()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reserveRead(pigeon.EventAccessDenied, "", ""); err != nil {
		return 0, nil, err
	}
	recs, err := rq.s.e.QuarantinePage(rq.ctx, pigeon.QuarantineQuery{Since: since, After: rq.query.Get("after"), Max: n})
	rq.keepRead(quarantineCost(recs))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"records": recs}, nil
}

func getQuarantine(rq *request) (int, any, error) {
	rq.reread = true
	rec, err := rq.s.e.QuarantineRecord(rq.ctx, rq.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"record": rec}, nil
}

func release(rq *request) (int, any, error) {
	var in struct {
		ContractID string `json:"contractId"`
	}
	if err := rq.body(&in, false); err != nil {
		return 0, nil, err
	}
	c, err := rq.caller(in.ContractID)
	if err != nil {
		return 0, nil, err
	}
	if c.ContractID == "" {
		return 0, nil, pigeon.NewError(pigeon.CodeContractRequired, "releasing re-publishes: an x-pigeon-contract with publish on the subject is required")
	}
	res, err := rq.s.e.ReleaseQuarantine(rq.ctx, c, rq.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return publishStatus(res), res, nil
}
