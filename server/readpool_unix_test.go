//go:build unix

package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// bob is a second principal that may read bulk.events.
const bob = "spiffe://test/bob"

// bulkFixture is a server whose engine (of MaxReadBytes maxRead) holds
// bulk.events, a pubsub subject alice publishes, receives and replays (and
// bob, with bob-token, receives and replays), filled with n messages of
// about size bytes each, and the contract alice reads it under.
func bulkFixture(t *testing.T, opts *server.Options, maxRead, n, size int) (*server.Server, string, string) {
	t.Helper()
	ctx := context.Background()
	cat := testCatalog()
	allow := []pigeon.RuleSpec{{Effect: "allow", Principals: []string{alice}}}
	readers := []pigeon.RuleSpec{{Effect: "allow", Principals: []string{alice, bob}}}
	cat.Subjects = append(cat.Subjects, pigeon.SubjectPolicy{
		Name: "bulk.events", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
		Replay: pigeon.ReplayPolicy{Allowed: true},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: allow, pigeon.OpReceive: readers, pigeon.OpReplay: readers},
	})
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "alice-token", Principal: alice},
			pigeon.StaticToken{Token: "bob-token", Principal: bob},
			pigeon.StaticToken{Token: "auditor-token", Principal: "auditor", Roles: []string{server.RoleAuditor}}),
		Catalog:      cat,
		Region:       "uk",
		MaxReadBytes: maxRead,
	})
	require.NoError(t, err)
	s, hs := serve(t, e, opts)
	p, err := e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	c, err := e.Negotiate(ctx, p, "uk", []string{"bulk.events"}, 0)
	require.NoError(t, err)
	blob := strings.Repeat("x", size)
	for i := range n {
		res, err := e.Publish(ctx, pigeon.Caller{Principal: p, Region: "uk", ContractID: c.ID()}, &pigeon.Message{
			Type: "bulk", Subject: "bulk.events", Intent: "record", Region: "uk",
			Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"blob":%q}`, i, blob)),
		})
		require.NoError(t, err)
		require.Equal(t, pigeon.StatusAccepted, res.Status)
	}
	return s, hs.URL, c.ID()
}

// stalledRead sends a replay of bulk.events on a connection whose receive
// buffer is a few kilobytes, and never reads the answer: the server's
// write of a large answer waits on it. Closing the connection ends it.
func stalledRead(t *testing.T, url, contract string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(url, "http://"))
	require.NoError(t, err)
	body := `{"reason":"slow"}`
	_, err = fmt.Fprintf(conn, "POST /v1/subjects/bulk.events/replay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n"+
		"X-Pigeon-Contract: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", contract, len(body), body)
	require.NoError(t, err)
	return conn
}

// TestReadsInFlightAreBounded: a client that asks for large answers and
// never reads them holds at most the read pool; while it holds it, other
// reads wait and are then refused 429 RATE_LIMITED before anything is
// read, leased or settled; once it lets go, they are served in full.
func TestReadsInFlightAreBounded(t *testing.T) {
	defer server.SetReadWait(50 * time.Millisecond)()
	// Each read reserves 2×8 MiB and 1 MiB before it reads; an answer of
	// 15 messages of 512 KiB costs about 15 MiB: the pool holds one.
	s, url, contract := bulkFixture(t, &server.Options{MaxReadBytesInFlight: 20 << 20}, 8<<20, 20, 512<<10)

	slow := stalledRead(t, url, contract)
	defer slow.Close()
	require.Eventually(t, func() bool { return s.ReadBytesInFlight() >= 14<<20 }, 10*time.Second, time.Millisecond,
		"the stalled answer holds its messages")

	for _, tc := range []struct{ method, path, token, body string }{
		{http.MethodPost, "/v1/subjects/bulk.events/replay", "alice-token", `{"reason":"audit","max":1}`},
		{http.MethodPost, "/v1/subjects/bulk.events/receive", "alice-token", `{"max":1}`},
		{http.MethodGet, "/v1/quarantine", "auditor-token", ""},
		{http.MethodGet, "/v1/audit?max=1", "auditor-token", ""},
	} {
		r := doRequest(t, tc.method, url+tc.path, tc.token, tc.body, "x-pigeon-contract", contract)
		require.Equal(t, http.StatusTooManyRequests, r.status, "%s: %s", tc.path, r.body)
		require.Equal(t, pigeon.CodeRateLimited, r.code(t))
		require.Equal(t, "1", r.header.Get("Retry-After"))
	}
	require.GreaterOrEqual(t, s.ReadBytesInFlight(), int64(14<<20), "refused reads hold nothing")

	require.NoError(t, slow.Close())
	require.Eventually(t, func() bool { return s.ReadBytesInFlight() == 0 }, 10*time.Second, time.Millisecond,
		"the stalled answer's memory goes back once its connection ends")

	// The refused receive settled nothing: the first message is still there.
	r := doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/receive", "alice-token", `{"max":1}`, "x-pigeon-contract", contract)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var got struct{ Messages []pigeon.Message }
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, 1, len(got.Messages))
	require.Equal(t, uint64(1), got.Messages[0].Sequence)
	require.Zero(t, s.ReadBytesInFlight(), "an answer written gives its memory back")

	r = doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/replay", "alice-token", `{"reason":"audit"}`, "x-pigeon-contract", contract)
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Equal(t, 15, len(got.Messages), "the engine's byte budget, not the pool, bounds one answer")
	r = doRequest(t, http.MethodGet, url+"/v1/audit", "auditor-token", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Zero(t, s.ReadBytesInFlight())
}

// TestReadsInFlightAreSharedFairly: a principal whose answers are read
// slowly holds at most its share of the read pool (a quarter, here one
// read's reservation): its further reads, on stalled connections or not,
// are refused 429 RATE_LIMITED naming MaxReadBytesPerPrincipal, while
// another principal's replay is served in full meanwhile.
func TestReadsInFlightAreSharedFairly(t *testing.T) {
	defer server.SetReadWait(50 * time.Millisecond)()
	// Each read reserves 2×8 MiB and 1 MiB (17 MiB, alice's whole share)
	// before it reads; an answer of 15 messages of 512 KiB costs about 15
	// MiB. The pool holds two such answers and a reservation: without
	// shares, alice's stalled reads would take it all.
	s, url, contract := bulkFixture(t, &server.Options{MaxReadBytesInFlight: 48 << 20}, 8<<20, 20, 512<<10)

	var stalled []net.Conn
	defer func() {
		for _, c := range stalled {
			_ = c.Close()
		}
	}()
	stalled = append(stalled, stalledRead(t, url, contract))
	require.Eventually(t, func() bool { return s.ReadBytesInFlight() >= 14<<20 }, 10*time.Second, time.Millisecond,
		"the stalled answer holds its messages")
	for range 3 {
		stalled = append(stalled, stalledRead(t, url, contract))
	}
	require.Eventually(t, func() bool { return s.ReadsRefused() == 3 }, 10*time.Second, time.Millisecond,
		"alice's further stalled reads are refused")
	require.LessOrEqual(t, s.ReadBytesInFlight(), int64(17<<20), "alice holds at most her share")

	r := doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/replay", "alice-token", `{"reason":"audit","max":1}`,
		"x-pigeon-contract", contract)
	require.Equal(t, http.StatusTooManyRequests, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeRateLimited, r.code(t))
	require.Contains(t, string(r.body), "MaxReadBytesPerPrincipal", "the refusal names the share")
	require.Equal(t, "1", r.header.Get("Retry-After"))

	r = doRequest(t, http.MethodPost, url+"/v1/contracts", "bob-token", `{"subjects":["bulk.events"]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	bobs := r.json(t)["contract"].(map[string]any)["id"].(string)
	r = doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/replay", "bob-token", `{"reason":"audit"}`, "x-pigeon-contract", bobs)
	require.Equal(t, http.StatusOK, r.status, "bob reads while alice stalls: %s", r.body)
	var got struct{ Messages []pigeon.Message }
	require.NoError(t, json.Unmarshal(r.body, &got))
	require.Len(t, got.Messages, 15)

	for _, c := range stalled {
		require.NoError(t, c.Close())
	}
	require.Eventually(t, func() bool { return s.ReadBytesInFlight() == 0 }, 10*time.Second, time.Millisecond,
		"the stalled answer's memory goes back once its connection ends")
	r = doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/replay", "alice-token", `{"reason":"audit","max":1}`,
		"x-pigeon-contract", contract)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// TestReadsInFlightUnbounded: a negative MaxReadBytesInFlight turns the
// pool off, and a stalled answer then keeps no other read waiting.
func TestReadsInFlightUnbounded(t *testing.T) {
	defer server.SetReadWait(50 * time.Millisecond)()
	s, url, contract := bulkFixture(t, &server.Options{MaxReadBytesInFlight: -1}, 8<<20, 20, 512<<10)
	slow := stalledRead(t, url, contract)
	defer slow.Close()
	// Wait until the stalled answer is being written: its first bytes arrive.
	_ = slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(slow).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "200")
	r := doRequest(t, http.MethodPost, url+"/v1/subjects/bulk.events/replay", "alice-token", `{"reason":"audit","max":1}`, "x-pigeon-contract", contract)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Zero(t, s.ReadBytesInFlight())
}

// TestQuarantinePagesOverHTTP: GET /v1/quarantine pages by since and
// after, the time and id of the last record of the page before, through
// records that share one instant (the fixture's clock stands still), and
// its pages go through the read pool.
func TestQuarantinePagesOverHTTP(t *testing.T) {
	f := newFixture(t)
	checkout := f.contract(t, "checkout-token", "payments.authorize")
	for i := range 3 {
		m := demo.Payment(fmt.Sprintf("o-%d", i))
		m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)
		r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, m), "x-pigeon-contract", checkout)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"quarantineId"`)
	}
	var ids []string
	path := "/v1/quarantine?max=1"
	for range 4 {
		r := f.do(t, http.MethodGet, path, "auditor-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var page struct {
			Records []struct{ ID, Time string }
		}
		require.NoError(t, json.Unmarshal(r.body, &page))
		if len(page.Records) == 0 {
			break
		}
		require.Len(t, page.Records, 1)
		last := page.Records[0]
		ids = append(ids, last.ID)
		path = "/v1/quarantine?max=1&since=" + url.QueryEscape(last.Time) + "&after=" + url.QueryEscape(last.ID)
	}
	require.Len(t, ids, 3)
	require.True(t, slices.IsSorted(ids), "one instant: by id")
	require.Len(t, slices.Compact(slices.Clone(ids)), 3, "each record once")
	require.Zero(t, f.s.ReadBytesInFlight())
}
