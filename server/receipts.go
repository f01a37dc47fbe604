package server

import (
	"errors"
	"fmt"
	"net/http"

	"pigeon"
	"pigeon/internal/readpool"
)

// maxLogWalks bounds the walks of the whole audit log that requests make
// at once (receipts): each reads every record twice, seconds of a core
// for a log of millions, and an auditor's credential must not be able to
// keep every core at it; one principal walks it for one request at a
// time. A request past either bound is answered 429 RATE_LIMITED at once,
// with Retry-After, and audited (access.denied, Ref "GET
// /v1/audit/receipts/{id} log walks"; see boundDenied).
const maxLogWalks = 2

// walkLog takes a slot for a walk of the audit log by principal: one of
// maxLogWalks, and the principal's only one, so that one credential
// cannot hold them all while other auditors wait. It returns what gives
// the slot back, or 429 RATE_LIMITED with Retry-After when none is free.
func (s *Server) walkLog(principal string) (release func(), err error) {
	s.walkMu.Lock()
	defer s.walkMu.Unlock()
	if s.walkers[principal] {
		return nil, walkRefused("this principal's receipts request before is still reading the audit log: one at a time")
	}
	select {
	case s.logWalks <- struct{}{}:
	default:
		return nil, walkRefused(fmt.Sprintf("the server is reading the audit log for %d other receipts requests, its most at once: try again shortly", maxLogWalks))
	}
	s.walkers[principal] = true
	return func() {
		s.walkMu.Lock()
		defer s.walkMu.Unlock()
		delete(s.walkers, principal)
		<-s.logWalks
	}, nil
}

// walkRefused is the 429 RATE_LIMITED of a receipts request that finds no
// walk of the log free, to be tried again in a second (Retry-After).
func walkRefused(msg string) *pigeon.Error {
	return &pigeon.Error{Code: pigeon.CodeRateLimited, Message: msg, Details: map[string]any{"retryAfterMs": int64(1000)}}
}

// receipts answers GET /v1/audit/receipts/{id}: the deliveries of message
// id the audit log records (pigeon.Engine.Receipts), at most ?max= of
// them (default and cap maxRecords), after the cursor ?after= names. When
// more are recorded, "next" is the cursor of the next page.
func receipts(rq *request) (int, any, error) {
	after, err := pigeon.ParseReceiptCursor(rq.query.Get("after"))
	if err != nil {
		return 0, nil, pigeon.NewError(pigeon.CodeBadRequest,
			"query parameter after must be a page's next: an audit sequence, or one, a colon and a message sequence (%s)", quoteCut(rq.query.Get("after"), 64))
	}
	n, err := rq.pageSize()
	if err != nil {
		return 0, nil, err
	}
	release, err := rq.s.walkLog(rq.p.ID)
	if err != nil {
		rq.boundDenied(pigeon.EventAccessDenied, boundLogWalks, "", "", "")
		return 0, nil, err
	}
	defer release()
	if err := rq.reserveRead(pigeon.EventAccessDenied, "", ""); err != nil {
		return 0, nil, err
	}
	rq.reread = true // a walk of the whole log, twice
	rs, err := rq.s.e.Receipts(rq.ctx, rq.r.PathValue("id"), pigeon.WithMaxReceipts(n), pigeon.WithReceiptsAfter(after))
	rq.keepRead(receiptsCost(rs))
	out := struct {
		Receipts []pigeon.Receipt `json:"receipts"`
		Next     string           `json:"next,omitempty"`
	}{Receipts: rs}
	switch {
	case errors.Is(err, pigeon.ErrReceiptsTruncated):
		out.Next = rs[len(rs)-1].Cursor().String()
	case err != nil:
		return 0, nil, err
	}
	if out.Receipts == nil {
		out.Receipts = []pigeon.Receipt{}
	}
	return http.StatusOK, out, nil
}

// receiptsCost is readpool.Cost for receipts.
func receiptsCost(rs []pigeon.Receipt) int64 {
	var n int64
	for i := range rs {
		r := &rs[i]
		n += int64(len(r.Event) + len(r.Principal) + len(r.ContractID) + len(r.Ref) + len(r.Subject))
	}
	return readpool.Cost(len(rs), n)
}
