package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// receiptsPage is the body of GET /v1/audit/receipts/{id}.
type receiptsPage struct {
	Receipts []pigeon.Receipt `json:"receipts"`
	Next     string           `json:"next"`
}

// TestReceiptsOverHTTP: an auditor asks the running server who was
// handed a message, GET /v1/audit/receipts/{id}, and reads receipts past
// one page through each page's next; the answers agree with
// Engine.Receipts. The route is the auditor's alone, and a malformed
// after or max is refused BAD_REQUEST.
func TestReceiptsOverHTTP(t *testing.T) {
	f := newFixture(t)
	orders := f.contract(t, "orders-token", "notifications.send")
	replayer := f.contract(t, "notify-replay-token", "notifications.send")
	r := f.do(t, http.MethodPost, "/v1/messages", "orders-token", msgBody(t, demo.Notification("n-1")), "x-pigeon-contract", orders)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var accepted struct {
		Message pigeon.Message `json:"message"`
	}
	require.NoError(t, json.Unmarshal(r.body, &accepted))
	id := accepted.Message.ID
	for i := range 5 {
		r := f.do(t, http.MethodPost, "/v1/subjects/notifications.send/replay", "notify-replay-token",
			fmt.Sprintf(`{"reason":"audit %d"}`, i), "x-pigeon-contract", replayer)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}
	want, err := f.e.Receipts(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, want, 5)

	get := func(t *testing.T, query string) receiptsPage {
		t.Helper()
		r := f.do(t, http.MethodGet, "/v1/audit/receipts/"+url.PathEscape(id)+query, "auditor-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var p receiptsPage
		require.NoError(t, json.Unmarshal(r.body, &p))
		return p
	}
	whole := get(t, "")
	require.Equal(t, want, whole.Receipts)
	require.Empty(t, whole.Next, "one page holds them all")

	var paged []pigeon.Receipt
	query := "?max=2"
	for pages := 1; ; pages++ {
		require.LessOrEqual(t, pages, 3)
		p := get(t, query)
		paged = append(paged, p.Receipts...)
		if p.Next == "" {
			require.Equal(t, 3, pages)
			break
		}
		last := p.Receipts[len(p.Receipts)-1]
		require.Equal(t, fmt.Sprintf("%d:%d", last.AuditSeq, last.Seq), p.Next)
		query = "?max=2&after=" + url.QueryEscape(p.Next)
	}
	require.Equal(t, want, paged)

	// An audit sequence alone: the receipts of later records.
	require.Equal(t, want[3:], get(t, fmt.Sprintf("?after=%d", want[2].AuditSeq)).Receipts)
	// An id nobody received: an empty list, not null.
	r = f.do(t, http.MethodGet, "/v1/audit/receipts/msg_nobody", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.JSONEq(t, `{"receipts":[]}`, string(r.body))

	for _, tc := range []struct {
		name, query, token string
		status             int
		code               pigeon.Code
	}{
		{"not an auditor", "", "orders-token", http.StatusForbidden, pigeon.CodeForbidden},
		{"no credential", "", "", http.StatusUnauthorized, pigeon.CodeUnauthenticated},
		{"after with a sign", "?after=-1", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after with a space", "?after=1:%202", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after past 64 bits", "?after=18446744073709551616", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after with two colons", "?after=1:2:3", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after with an empty sequence", "?after=1:", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after with an empty audit sequence", "?after=:1", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"max not a number", "?max=many", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"after given twice", "?after=1&after=2", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
		{"a parameter it does not take", "?from=1", "auditor-token", http.StatusBadRequest, pigeon.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, http.MethodGet, "/v1/audit/receipts/"+url.PathEscape(id)+tc.query, tc.token, "")
			require.Equal(t, tc.status, r.status, "%s", r.body)
			require.Equal(t, tc.code, r.code(t))
		})
	}
	r = f.do(t, http.MethodPost, "/v1/audit/receipts/"+url.PathEscape(id), "auditor-token", "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
}

// TestReceiptsWalksAreBounded: while maxLogWalks receipts requests read
// the audit log, another is answered 429 RATE_LIMITED at once, with
// Retry-After, and nothing of it is read; once one ends, it is answered.
func TestReceiptsWalksAreBounded(t *testing.T) {
	f := newFixture(t)
	release := server.HoldLogWalks(f.s)
	r := f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	release()
	r = f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// TestReceiptsOneWalkPerPrincipal: while one principal's receipts request
// walks the audit log, its next is answered 429 RATE_LIMITED at once, and
// another auditor is still answered: one credential cannot hold both
// walks while the others wait.
func TestReceiptsOneWalkPerPrincipal(t *testing.T) {
	f := newFixture(t)
	p, err := f.e.Authenticate(context.Background(), "auditor-token")
	require.NoError(t, err)
	release := server.HoldLogWalkOf(f.s, p.ID)
	r := f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	require.Contains(t, r.message(t), "one at a time")
	require.Equal(t, "1", r.header.Get("Retry-After"))
	r = f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "checkout-auditor-token", "")
	require.Equal(t, http.StatusOK, r.status, "another auditor: %s", r.body)
	release()
	r = f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Zero(t, server.LogWalksInUse(f.s))
}
