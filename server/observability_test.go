package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"pigeon"
	"pigeon/demo"
	"pigeon/docs"
	"pigeon/internal/testlog"
	"pigeon/programs"
	"pigeon/server"
	"pigeon/transport/mesgd"
)

// openAPIRoutes lists the operations of docs/openapi.yaml as "METHOD /path".
func openAPIRoutes(t *testing.T) []string {
	t.Helper()
	var d struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(docs.OpenAPI(), &d))
	var out []string
	for p, item := range d.Paths {
		for m := range item {
			switch m {
			case "get", "put", "post", "delete", "patch", "head", "options":
				out = append(out, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIMatchesRoutes fails when the server answers a route that
// docs/openapi.yaml does not describe, or the document describes one the
// server does not answer. A new route (s.route or s.handle) needs its
// entry under paths: in docs/openapi.yaml.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	e, err := pigeon.New(context.Background(), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	// Every optional route is on: /metrics on the main listener, the
	// programs API and mesgd's format.
	progs, err := programs.New(context.Background(), e, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, progs.Close(context.Background())) }()
	s := server.New(e, &server.Options{Metrics: http.NotFoundHandler(), Programs: progs, Mesgd: &mesgd.Options{Subject: "chat.messages"}})
	served, described := s.Routes(), openAPIRoutes(t)
	var undocumented, unserved []string
	for _, r := range served {
		if !slices.Contains(described, r) {
			undocumented = append(undocumented, r)
		}
	}
	for _, r := range described {
		if !slices.Contains(served, r) {
			unserved = append(unserved, r)
		}
	}
	require.Empty(t, undocumented, "routes the server answers that docs/openapi.yaml does not describe")
	require.Empty(t, unserved, "routes docs/openapi.yaml describes that the server does not answer")
	for _, r := range []string{"GET /v1/subjects", "PUT /v1/programs/{name}", "GET /mesgd/{route}", "GET /metrics"} {
		require.Contains(t, served, r)
	}
}

func TestOpenAPIAndDocsServed(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/openapi.yaml", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, docs.OpenAPI(), r.body)
	r = f.do(t, http.MethodGet, "/docs", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.header.Get("Content-Type"), "text/html")
	require.Contains(t, string(r.body), "POST /v1/quarantine/{id}/release")
	require.NotContains(t, string(r.body), "<script", "the API page runs no script")
	require.Contains(t, string(r.body), "<code>QUARANTINE_NOT_FOUND</code>", "the error codes")
	r = f.do(t, http.MethodGet, "/v1/asyncapi", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "3.0.0", r.json(t)["asyncapi"])
}

func TestConsoleAssets(t *testing.T) {
	f := newFixture(t)
	r := f.do(t, http.MethodGet, "/", "", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, string(r.body), `<script src="/console/app.js"`)
	require.NotContains(t, string(r.body), "http://", "no external asset")
	require.NotContains(t, string(r.body), "https://", "no external asset")
	require.Contains(t, r.header.Get("Content-Security-Policy"), "default-src 'self'")
	for _, a := range []struct{ path, ctype string }{{"/console/app.js", "text/javascript"}, {"/console/app.css", "text/css"}} {
		r = f.do(t, http.MethodGet, a.path, "", "")
		require.Equal(t, http.StatusOK, r.status, a.path)
		require.Contains(t, r.header.Get("Content-Type"), a.ctype)
	}
	require.Equal(t, pigeon.CodeNotFound, f.do(t, http.MethodGet, "/console/nope.js", "", "").code(t))
	require.Equal(t, pigeon.CodeNotFound, f.do(t, http.MethodGet, "/nope", "", "").code(t), "the catch-all still answers 404")
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data map[string]any
}

// openEvents opens the console stream as token and returns its events.
func (f *fixture) openEvents(t *testing.T, ctx context.Context, token string) (*http.Response, <-chan sseEvent) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.hs.URL+"/v1/console/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	ch := make(chan sseEvent, 64)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.data)
			case line == "":
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	return res, ch
}

func TestConsoleEventsRefuseWithoutAuditor(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	for token, code := range map[string]int{"": http.StatusUnauthorized, "expired-or-wrong": http.StatusUnauthorized, "orders-token": http.StatusForbidden} {
		res, _ := f.openEvents(t, ctx, token)
		require.Equal(t, code, res.StatusCode, "token %q", token)
	}
}

// TestConsoleEventsStreamDecisions: a denial made over HTTP reaches the
// stream, with the state and rates before it, whether the denial is in
// the stream's backlog (made before it opened) or made while it is open.
func TestConsoleEventsStreamDecisions(t *testing.T) {
	for _, before := range []bool{true, false} {
		t.Run(map[bool]string{true: "backlog", false: "live"}[before], func(t *testing.T) {
			f := newFixture(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			deny := func() {
				orders := f.contract(t, "orders-token", "notifications.send")
				bad := demo.Notification("n-1")
				bad.Type = ""
				r := f.do(t, http.MethodPost, "/v1/messages", "orders-token", msgBody(t, bad), "x-pigeon-contract", orders)
				require.Equal(t, pigeon.CodeEnvelopeInvalid, r.code(t))
			}
			if before {
				deny()
			}
			res, events := f.openEvents(t, ctx, "auditor-token")
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
			hello := <-events
			require.Equal(t, "hello", hello.name)
			require.Equal(t, demo.Auditor, hello.data["principal"])
			if !before {
				deny()
			}

			seen := map[string]bool{}
			for ev := range events {
				seen[ev.name] = true
				if ev.name == "state" {
					require.Contains(t, ev.data, "groups")
					require.Contains(t, ev.data, "auditRecords")
					require.Contains(t, ev.data, "subjects")
				}
				if ev.name != "decisions" {
					continue
				}
				require.True(t, seen["state"] && seen["rates"], "state and rates come first: %v", seen)
				ds := ev.data["decisions"].([]any)
				d := ds[len(ds)-1].(map[string]any)
				require.Equal(t, "notifications.send", d["subject"])
				require.Equal(t, "deny", d["outcome"])
				require.Equal(t, "ENVELOPE_INVALID", d["code"])
				require.Equal(t, demo.Orders, d["principal"])
				return
			}
			t.Fatal("the stream ended before the denial arrived")
		})
	}
}

// TestConsoleEventsListLiveContracts: the state event lists the
// negotiated contracts in force, with their total.
func TestConsoleEventsListLiveContracts(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	orders := f.contract(t, "orders-token", "notifications.send")
	res, events := f.openEvents(t, ctx, "auditor-token")
	require.Equal(t, http.StatusOK, res.StatusCode)
	for ev := range events {
		if ev.name != "state" {
			continue
		}
		list, _ := ev.data["liveContracts"].([]any)
		require.Equal(t, float64(len(list)), ev.data["liveContractsTotal"])
		for _, k := range list {
			k := k.(map[string]any)
			if k["id"] == orders {
				require.Equal(t, demo.Orders, k["principal"])
				require.Equal(t, "token", k["auth"])
				require.Equal(t, []any{"notifications.send"}, k["subjects"])
				require.NotEmpty(t, k["expiresAt"])
				return
			}
		}
	}
	t.Fatal("the stream ended without listing the contract")
}

// TestConsoleEventsEndOnShutdown: an open stream does not hold the
// server's shutdown.
func TestConsoleEventsEndOnShutdown(t *testing.T) {
	f := newFixture(t)
	res, events := f.openEvents(t, t.Context(), "auditor-token")
	require.Equal(t, http.StatusOK, res.StatusCode)
	<-events
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, f.s.Shutdown(ctx))
	for range events { // drains until the server closes the stream
	}
}

func TestVerifyAuditRoute(t *testing.T) {
	f := newFixture(t)
	require.Equal(t, pigeon.CodeForbidden, f.do(t, http.MethodPost, "/v1/audit/verify", "orders-token", "").code(t))
	r := f.do(t, http.MethodPost, "/v1/audit/verify", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	v := r.json(t)
	require.Equal(t, true, v["ok"])
	require.Greater(t, v["verified"].(float64), 0.0)
}

// TestFeedStaysBoundedUnderAFlood: a flood of decisions keeps the ring's
// size, and a reader asking after any point gets at most its batch and the
// count of what it missed.
func TestFeedStaysBoundedUnderAFlood(t *testing.T) {
	feed := server.NewFeed(64)
	const n = 100_000
	for i := range n {
		feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: "SCHEMA_INVALID",
			Subject: fmt.Sprintf("flood.%d", i), Principal: "p"})
	}
	feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventDeliveryAcked)}) // not a decision
	ds, next, skipped := feed.Since(0, 100)
	require.Len(t, ds, 64, "no more than the ring holds")
	require.Equal(t, uint64(n), next)
	require.Equal(t, uint64(n-64), skipped)
	require.Equal(t, "flood.99999", ds[len(ds)-1].Subject, "the newest last")
	ds, _, skipped = feed.Since(n-10, 4)
	require.Len(t, ds, 4)
	require.Equal(t, uint64(6), skipped)
	ds, _, skipped = feed.Since(n, 100)
	require.Empty(t, ds)
	require.Zero(t, skipped)
	rates := feed.Rates()
	require.LessOrEqual(t, len(rates), 1000+1, "subjects beyond the cap share one entry")
	var total uint64
	for _, r := range rates {
		total += r.Denied
	}
	require.Equal(t, uint64(n), total)
}

// TestFeedRatesKeepInventedSubjectsApart: refusals of subjects the
// catalog does not hold count under one "_unknown" entry of the rates, so
// that a client publishing to ever new invented names cannot fill the
// rates' cap and push the catalog's subjects under "_other"; the decisions
// keep the names sent, for auditors.
func TestFeedRatesKeepInventedSubjectsApart(t *testing.T) {
	feed := server.NewFeed(64)
	feed.SetInCatalog(func(s string) bool { return s == "payments.authorize" })
	for i := range 5000 {
		feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: string(pigeon.CodeSubjectNotFound),
			Gate: pigeon.GateContract, Subject: fmt.Sprintf("invented.%d", i), Principal: "p"})
		feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: string(pigeon.CodeEnvelopeInvalid),
			Gate: pigeon.GateEnvelope, Subject: fmt.Sprintf("made.up.%d", i), Principal: "p"})
	}
	feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: string(pigeon.CodeEnvelopeInvalid),
		Gate: pigeon.GateEnvelope, Subject: "payments.authorize", Principal: "p"})
	feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow", Subject: "payments.authorize", Principal: "p"})
	rates := feed.Rates()
	require.Equal(t, map[string]server.SubjectRates{
		"_unknown":           {Denied: 10000},
		"payments.authorize": {Accepted: 1, Denied: 1},
	}, rates)
	ds, _, _ := feed.Since(0, 100)
	require.Equal(t, "made.up.4999", ds[len(ds)-3].Subject, "a decision keeps the name sent")
}

// TestRequestIDsOnLogLines: every request's lines carry its id (the
// client's, or one drawn), the answer names it, and no line holds a token
// or a payload value.
func TestRequestIDsOnLogLines(t *testing.T) {
	f := newFixture(t)
	var logs testlog.Buffer
	s := server.New(f.e, &server.Options{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	hs := httptest.NewServer(s)
	defer hs.Close()
	orders := f.contract(t, "orders-token", "notifications.send")
	r := doRequest(t, http.MethodPost, hs.URL+"/v1/messages", "orders-token", msgBody(t, demo.Notification("n-secret")),
		"x-pigeon-contract", orders, "X-Request-Id", "trace-42")
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, "trace-42", r.header.Get("X-Request-Id"))
	r = doRequest(t, http.MethodGet, hs.URL+"/v1/subjects", "", "", "X-Request-Id", "bad id with spaces")
	drawn := r.header.Get("X-Request-Id")
	require.NotEmpty(t, drawn)
	require.NotEqual(t, "bad id with spaces", drawn)

	ids := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), line)
		id, _ := v["request_id"].(string)
		require.NotEmpty(t, id, "a line without its request id: %s", line)
		ids[id] = true
	}
	require.True(t, ids["trace-42"] && ids[drawn], "%v", ids)
	for _, secret := range []string{"orders-token", "cust-42", "n-secret"} {
		require.NotContains(t, logs.String(), secret)
	}
}

// TestConsoleEventsSampleAFlood: under a flood of decisions every batch the
// stream sends holds at most 100 of them, and says how many it left out.
func TestConsoleEventsSampleAFlood(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, events := f.openEvents(t, ctx, "auditor-token")
	require.Equal(t, http.StatusOK, res.StatusCode)
	flooding := make(chan struct{})
	go func() {
		defer close(flooding)
		for i := 0; ctx.Err() == nil && i < 200_000; i++ {
			f.feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: "SCHEMA_INVALID", Subject: "notifications.send"})
		}
	}()
	var skipped float64
	for ev := range events {
		if ev.name != "decisions" {
			continue
		}
		require.LessOrEqual(t, len(ev.data["decisions"].([]any)), 100)
		if skipped += ev.data["skipped"].(float64); skipped > 0 {
			break
		}
	}
	cancel()
	<-flooding
	require.Positive(t, skipped, "a flood is sampled")
}

// FuzzFeedSince: whatever the ring's size, the decisions recorded and the
// reader's position, Since returns the newest decisions in order, at most
// max and at most the ring, and accounts for every other one as skipped.
func FuzzFeedSince(f *testing.F) {
	f.Add(uint8(4), uint16(10), uint16(3), uint8(2))
	f.Add(uint8(1), uint16(0), uint16(5), uint8(0))
	f.Add(uint8(16), uint16(1000), uint16(999), uint8(100))
	f.Fuzz(func(t *testing.T, size uint8, n, after uint16, max uint8) {
		feed := server.NewFeed(int(size))
		for i := range int(n) {
			feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow", MessageID: strconv.Itoa(i + 1)})
		}
		ds, next, skipped := feed.Since(uint64(after), int(max))
		require.Equal(t, uint64(n), next)
		from := uint64(after)
		if from > uint64(n) {
			from = 0 // a reader ahead of the feed starts again
		}
		require.Equal(t, uint64(n)-from, uint64(len(ds))+skipped)
		ring := int(size)
		if ring == 0 {
			ring = server.DefaultFeedSize
		}
		require.LessOrEqual(t, len(ds), min(int(max), ring))
		for i, d := range ds {
			require.Equal(t, next-uint64(len(ds))+uint64(i)+1, d.Seq)
			require.Equal(t, strconv.FormatUint(d.Seq, 10), d.MessageID)
		}
	})
}

// TestConsoleEventsOutliveTheServerTimeouts: a stream lasts past the read
// and write timeouts of the HTTP server that serves it.
//
// The handler lifts the read deadline as it starts: the timeouts leave it
// a second for that (-race on a busy machine can hold a goroutine for
// hundreds of milliseconds), and the stream is watched for twice as long.
func TestConsoleEventsOutliveTheServerTimeouts(t *testing.T) {
	f := newFixture(t)
	s := server.New(f.e, &server.Options{ReadTimeout: time.Second, WriteTimeout: time.Second, Feed: f.feed})
	l := arrivedListener(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	defer func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	}()
	g := &fixture{hs: &httptest.Server{URL: "http://" + l.Addr().String()}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	res, events := g.openEvents(t, ctx, "auditor-token")
	require.Equal(t, http.StatusOK, res.StatusCode)
	states := 0
	for ev := range events {
		if ev.name == "state" {
			if states++; states == 3 { // two seconds in: well past both timeouts
				return
			}
		}
	}
	t.Fatalf("the stream ended after %d state events", states)
}

// TestConsoleEventsEndWhenRevoked: a console stream ends, with an end
// event naming why, within a tick of its principal's grant being revoked
// or its auditor role taken away; an unrevoked stream goes on.
func TestConsoleEventsEndWhenRevoked(t *testing.T) {
	for _, tc := range auditorRevocations {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			const account = "ops-console"
			token, jti := f.auditorGrant(t, account)

			res, events := f.openEvents(t, ctx, token)
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Equal(t, "hello", (<-events).name)
			// Two ticks go by with the grant in force: the stream goes on.
			for seen := 0; seen < 2; {
				ev, ok := <-events
				require.True(t, ok, "the stream ended while the grant was in force")
				require.NotEqual(t, "end", ev.name)
				if ev.name == "state" {
					seen++
				}
			}

			tc.revoke(t, f, account, jti)
			deadline := time.After(10 * time.Second)
			for {
				select {
				case ev, ok := <-events:
					require.True(t, ok, "the stream closed without an end event")
					if ev.name != "end" {
						continue
					}
					e := ev.data["error"].(map[string]any)
					if tc.code != "" {
						require.Equal(t, string(tc.code), e["code"])
					}
					require.NotEmpty(t, e["message"])
					_, open := <-events
					require.False(t, open, "the stream goes on after its end event")
					return
				case <-deadline:
					t.Fatal("the stream went on after the revocation")
				}
			}
		})
	}
}

// auditorGrant creates account with the auditor role and a grant of it to
// the account, and returns the grant's token and id.
func (f *fixture) auditorGrant(t *testing.T, account string) (token, jti string) {
	t.Helper()
	r := f.do(t, http.MethodPost, "/v1/accounts", "admin-token", `{"id":"`+account+`"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = f.do(t, http.MethodPut, "/v1/accounts/"+account+"/roles/"+server.RoleAuditor, "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = f.do(t, http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+account+`","roles":["`+server.RoleAuditor+`"],"ttlMs":600000}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	g := r.json(t)
	return g["token"].(string), g["jti"].(string)
}

// auditorRevocations are the ways an auditor's grant (auditorGrant) stops
// standing, and the code a request on it gets then ("": some refusal).
var auditorRevocations = []struct {
	name   string
	revoke func(t *testing.T, f *fixture, account, jti string)
	code   pigeon.Code
}{
	{"grant revoked", func(t *testing.T, f *fixture, _, jti string) {
		require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/grants/"+jti, "admin-token", "").status)
	}, pigeon.CodeUnauthenticated},
	{"auditor role taken away", func(t *testing.T, f *fixture, account, _ string) {
		r := f.do(t, http.MethodDelete, "/v1/accounts/"+account+"/roles/"+server.RoleAuditor, "admin-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	}, pigeon.CodeForbidden},
	{"account deleted", func(t *testing.T, f *fixture, account, _ string) {
		require.Equal(t, http.StatusOK, f.do(t, http.MethodDelete, "/v1/accounts/"+account, "admin-token", "").status)
	}, ""},
}
