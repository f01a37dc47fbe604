package server_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/audittest"
	"pigeon/internal/testclock"
	"pigeon/server"
	"pigeon/transport/ws"
)

// boundFixture is newFixture's server with opts (its Feed set), its
// engine's clock standing still until advanced: every refusal of a flood
// falls in one coalescing window.
func boundFixture(t *testing.T, opts *server.Options) *fixture {
	t.Helper()
	clk := testclock.New(time.Now())
	tokens := append(demo.Tokens(), pigeon.StaticToken{Token: "alice-token", Principal: alice})
	feed := server.NewFeed(0)
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Now:           clk.Now,
		Observer:      feed,
	})
	require.NoError(t, err)
	opts.Feed = feed
	s, hs := serve(t, e, opts)
	return &fixture{e: e, s: s, hs: hs, clock: clk, feed: feed}
}

// boundRecords closes the coalescing windows of f's engine and returns its
// RATE_LIMITED records of ev (audittest.BoundRefusals).
func boundRecords(t *testing.T, f *fixture, ev pigeon.Event) []pigeon.AuditRecord {
	t.Helper()
	f.clock.Advance(2 * time.Second) // the runs' windows close: their counts are written
	return audittest.BoundRefusals(t, f.e, ev, pigeon.CodeRateLimited)
}

// TestRequestBytesRefusalsAudited: POST /v1/requests refused 429
// RATE_LIMITED before it is published, because its principal's requests
// waiting for replies (over HTTP and WebSocket) hold
// ws.Options.MaxRequestBytesPerPrincipal, is audited as a request the
// engine refuses is: publish.denied, naming the principal, the contract,
// the subject, the message and where it was refused ("POST /v1/requests
// request bytes"), coalesced per principal, subject and code, so a flood
// of them writes one record and one count. Before, it left no record.
func TestRequestBytesRefusalsAudited(t *testing.T) {
	f := boundFixture(t, &server.Options{WebSocket: &ws.Options{MaxRequestBytesPerPrincipal: 1}}) // one request waiting
	id := f.contract(t, "checkout-token", "payments.authorize")
	request := func(m *pigeon.Message, timeoutMs int) response {
		return f.do(t, http.MethodPost, "/v1/requests", "checkout-token",
			`{"timeoutMs":`+strconv.Itoa(timeoutMs)+`,"message":`+msgBody(t, m)+`}`, "x-pigeon-contract", id)
	}
	ctx := context.Background()
	got, goOn := make(chan string, 1), make(chan struct{})
	sub, err := f.e.Handle(ctx, "gateway-token", "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		<-goOn
		_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		return err
	})
	require.NoError(t, err)
	defer sub.Unsubscribe(ctx)
	first := make(chan response, 1)
	go func() { first <- request(demo.Payment("o-0"), 20000) }()
	defer func() { <-first }()
	defer close(goOn) // first: the waiting request is answered once the flood is over
	<-got             // the first request waits for its reply, holding the bound

	const flood = 30
	for i := range flood {
		m := demo.Payment("o-" + strconv.Itoa(i+1))
		m.ID = "req-" + strconv.Itoa(i+1)
		r := request(m, 100)
		require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	}

	recs := boundRecords(t, f, pigeon.EventPublishDenied)
	require.Less(t, len(recs), flood, "coalesced")
	require.Equal(t, []string{"POST /v1/requests request bytes", "coalesced:" + strconv.Itoa(flood-1) + " last:POST /v1/requests request bytes"}, audittest.Refs(recs))
	for _, r := range recs {
		require.Equal(t, demo.Checkout, r.Principal)
		require.Equal(t, id, r.ContractID)
		require.Equal(t, "payments.authorize", r.Subject)
	}
	require.Equal(t, "req-1", recs[0].MessageID, "the run's first names its message")
}

// TestReadBudgetRefusalsAudited: a read of the API refused 429
// RATE_LIMITED before anything is read, leased or settled, because the
// server's read pool has no room for it (Options.MaxReadBytesInFlight,
// after waiting), is audited: a receive or replay as the engine audits
// one it refuses (receive.denied, replay.denied: the principal, the
// contract, the subject when the catalog has it), a page of the audit
// log, of the quarantine or of receipts as an operation refused to a
// principal (access.denied); each with the route and the bound as Ref
// ("POST /v1/subjects/{name}/replay read budget"), coalesced per event,
// principal, subject and code, so a flood writes one record and one
// count. A read served writes nothing of the kind. Before, these
// refusals left no record.
func TestReadBudgetRefusalsAudited(t *testing.T) {
	for _, tc := range []struct {
		name, method, path, token string
		subjects                  []string // the contract the read names, if any
		body                      string
		ev                        pigeon.Event
		principal, subject, ref   string
	}{
		{"replay", http.MethodPost, "/v1/subjects/notifications.send/replay", "notify-replay-token", []string{"notifications.send"},
			`{"reason":"audit","max":1}`, pigeon.EventReplayDenied, demo.NotifyReplay, "notifications.send",
			"POST /v1/subjects/{name}/replay read budget"},
		{"receive", http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", []string{"notifications.send"},
			`{"max":1}`, pigeon.EventReceiveDenied, demo.Notifier, "notifications.send",
			"POST /v1/subjects/{name}/receive read budget"},
		{"receive of a subject not in the catalog", http.MethodPost, "/v1/subjects/no.such.subject/receive", "notifier-token", []string{"notifications.send"},
			`{"max":1}`, pigeon.EventReceiveDenied, demo.Notifier, "",
			"POST /v1/subjects/{name}/receive read budget"},
		{"audit", http.MethodGet, "/v1/audit?max=1", "auditor-token", nil, "", pigeon.EventAccessDenied, demo.Auditor, "",
			"GET /v1/audit read budget"},
		{"quarantine", http.MethodGet, "/v1/quarantine", "auditor-token", nil, "", pigeon.EventAccessDenied, demo.Auditor, "",
			"GET /v1/quarantine read budget"},
		{"receipts", http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", nil, "", pigeon.EventAccessDenied, demo.Auditor, "",
			"GET /v1/audit/receipts/{id} read budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer server.SetReadWait(time.Millisecond)()
			const pool = 64 << 20
			f := boundFixture(t, &server.Options{MaxReadBytesInFlight: pool})
			var headers []string
			var contract string
			if tc.subjects != nil {
				contract = f.contract(t, tc.token, tc.subjects...)
				headers = []string{"x-pigeon-contract", contract}
			}
			release := server.HoldReadBytes(f.s, "another reader", pool) // answers written slowly hold the whole pool

			const flood = 10
			for range flood {
				r := f.do(t, tc.method, tc.path, tc.token, tc.body, headers...)
				require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
				require.Equal(t, pigeon.CodeRateLimited, r.code(t))
				require.Contains(t, string(r.body), "MaxReadBytesInFlight")
			}

			recs := boundRecords(t, f, tc.ev)
			require.Less(t, len(recs), flood, "coalesced")
			require.Equal(t, []string{tc.ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + tc.ref}, audittest.Refs(recs))
			for _, r := range recs {
				require.Equal(t, tc.principal, r.Principal)
				require.Equal(t, contract, r.ContractID)
				require.Equal(t, tc.subject, r.Subject)
			}

			release()
			r := f.do(t, tc.method, tc.path, tc.token, tc.body, headers...)
			require.NotEqual(t, http.StatusTooManyRequests, r.status, "%s", r.body)
			require.Len(t, boundRecords(t, f, tc.ev), len(recs), "a read served writes no refusal")
		})
	}
}

// TestLogWalkRefusalsAudited: GET /v1/audit/receipts/{id} refused 429
// RATE_LIMITED at once because the server walks the audit log for its
// most receipts requests already, or for one of the same principal, is
// audited as an operation refused to a principal: access.denied, Ref
// "GET /v1/audit/receipts/{id} log walks", coalesced per principal and
// code. Before, it left no record.
func TestLogWalkRefusalsAudited(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold func(*server.Server) (release func())
	}{
		{"every walk taken", server.HoldLogWalks},
		{"the principal's walk taken", func(s *server.Server) func() { return server.HoldLogWalkOf(s, demo.Auditor) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := boundFixture(t, &server.Options{})
			release := tc.hold(f.s)
			defer release()
			const flood = 10
			for range flood {
				r := f.do(t, http.MethodGet, "/v1/audit/receipts/msg_x", "auditor-token", "")
				require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
				require.Equal(t, pigeon.CodeRateLimited, r.code(t))
			}
			const ref = "GET /v1/audit/receipts/{id} log walks"
			recs := boundRecords(t, f, pigeon.EventAccessDenied)
			require.Equal(t, []string{ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + ref}, audittest.Refs(recs))
			for _, r := range recs {
				require.Equal(t, demo.Auditor, r.Principal)
			}
		})
	}
}

// TestConsoleStreamRefusalsAudited: GET /v1/console/events refused 429
// RATE_LIMITED because its principal holds
// Options.MaxConsoleStreamsPerPrincipal streams is audited as an
// operation refused to a principal: access.denied, Ref "GET
// /v1/console/events console streams per principal", coalesced per
// principal and code. Before, it left no record.
func TestConsoleStreamRefusalsAudited(t *testing.T) {
	f := boundFixture(t, &server.Options{MaxConsoleStreamsPerPrincipal: 1})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, events := f.openEvents(t, ctx, "auditor-token")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "hello", (<-events).name)

	const flood = 10
	for range flood {
		r := f.do(t, http.MethodGet, "/v1/console/events", "auditor-token", "")
		require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
		require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	}
	const ref = "GET /v1/console/events console streams per principal"
	recs := boundRecords(t, f, pigeon.EventAccessDenied)
	require.Equal(t, []string{ref, "coalesced:" + strconv.Itoa(flood-1) + " last:" + ref}, audittest.Refs(recs))
	for _, r := range recs {
		require.Equal(t, demo.Auditor, r.Principal)
	}
}
