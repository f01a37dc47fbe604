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
// keep every core at it. A request past the bound is answered 429
// RATE_LIMITED at once, with Retry-After.
const maxLogWalks = 2

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
	select {
	case rq.s.logWalks <- struct{}{}:
		defer func() { <-rq.s.logWalks }()
	default:
		return 0, nil, &pigeon.Error{Code: pigeon.CodeRateLimited,
			Message: fmt.Sprintf("the server is reading the audit log for %d other receipts requests, its most at once: try again shortly", maxLogWalks),
			Details: map[string]any{"retryAfterMs": int64(1000)}}
	}
	if err := rq.reserveRead(); err != nil {
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
