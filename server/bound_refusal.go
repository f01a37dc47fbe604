package server

import (
	"net/http"

	"pigeon"
)

// The bounds of the server's own that refuse a request RATE_LIMITED
// before the engine sees it, as the Ref of its audit record names them
// after the route ("POST /v1/requests request bytes"; see boundDenied).
const (
	// boundRequestBytes: the principal's requests waiting for replies,
	// over HTTP and WebSocket, hold ws.Options.MaxRequestBytesPerPrincipal.
	boundRequestBytes = "request bytes"
	// boundReadBudget: the read pool has no room for a read
	// (Options.MaxReadBytesInFlight, after waiting), or the principal's
	// reads hold their share of it (MaxReadBytesPerPrincipal).
	boundReadBudget = "read budget"
	// boundLogWalks: the server walks the audit log for maxLogWalks
	// receipts requests already, or for one of the same principal.
	boundLogWalks = "log walks"
	// boundConsoleStreams: the principal holds
	// Options.MaxConsoleStreamsPerPrincipal console streams.
	boundConsoleStreams = "console streams per principal"
)

// boundDenied audits rq, refused RATE_LIMITED by bound, a bound of the
// server's own, before the engine saw it (see Server.boundDenied): ev
// names the operation refused, contractID, subject and messageID what
// the request names, if anything.
func (rq *request) boundDenied(ev pigeon.Event, bound, contractID, subject, messageID string) {
	rq.s.boundDenied(rq.r, rq.p, ev, bound, pigeon.AuditRecord{ContractID: contractID, Subject: subject, MessageID: messageID})
}

// boundDenied writes the audit record of r, a request of p refused
// RATE_LIMITED by bound, a bound of the server's own, before the engine
// saw it, as the engine's own gates' refusals are audited: ev (the
// refused operation's event: publish.denied for a request,
// receive.denied or replay.denied for a read of messages, access.denied
// for any other operation), outcome deny, the principal, rec's contract
// and message id, and Ref naming the route and the bound ("GET
// /v1/audit read budget"), with no gate (no gate of the engine judged
// it). rec's subject is named only when the catalog has it: the caller
// may name any, and a new one each time would start a new run.
//
// The engine coalesces RATE_LIMITED refusals per event, principal,
// subject and code, whatever their Ref: a flood of refused requests
// writes the first of a run and, once its second has passed, one record
// counting the rest, not one record each, naming the latest refusal's
// Ref ("(refs differ)" before it when the rest were refused at more than
// one bound). It runs on the request's goroutine, after the
// bound's lock was given back, and only for a refusal: a request the
// bound lets through costs nothing more. The refusal stands whether or
// not its record is written.
//
// Connections refused as they are accepted (Options.MaxConnections,
// MaxConnectionsPerIP, a source locked out) are not audited here: they
// name no principal, the accept loop must not wait on the audit log,
// and a locked-out source's refused credentials are already audited
// (auth.failed). ConnStats counts them and the Logger warns of them.
func (s *Server) boundDenied(r *http.Request, p *pigeon.Principal, ev pigeon.Event, bound string, rec pigeon.AuditRecord) {
	rec.Ref = operation(r) + " " + bound
	if p != nil {
		rec.Principal = p.ID
	}
	if rec.Subject != "" {
		if _, err := s.e.Subject(rec.Subject); err != nil {
			rec.Subject = ""
		}
	}
	_ = s.e.Record(r.Context(), ev, pigeon.CodeRateLimited, rec)
}
