package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"

	"pigeon/demo"
	"pigeon/internal/leakcheck"
	"pigeon/internal/testlog"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// running is a `pigeon serve` started by a test.
type running struct {
	url    string
	data   string
	out    *testlog.Buffer
	errOut *testlog.Buffer
	stop   func()
	result chan error
}

// startServe runs serve on 127.0.0.1:0 until the test ends (or stop).
func startServe(t *testing.T, cfg serveConfig) *running {
	t.Helper()
	if cfg.data == "" {
		cfg.data = filepath.Join(t.TempDir(), "pigeon-data")
	}
	cfg.addr, cfg.region, cfg.sync, cfg.shutdownTimeout = "127.0.0.1:0", "uk", "batch", 10*time.Second
	addr := make(chan string, 1)
	cfg.ready = func(a string) { addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{data: cfg.data, out: &testlog.Buffer{}, errOut: &testlog.Buffer{}, result: make(chan error, 1)}
	go func() { r.result <- serve(ctx, cfg, r.out, r.errOut) }()
	select {
	case a := <-addr:
		r.url = "http://" + a
	case err := <-r.result:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	var once sync.Once
	var err error
	r.stop = func() {
		once.Do(func() {
			cancel()
			err = <-r.result
		})
		require.NoError(t, err)
	}
	t.Cleanup(r.stop)
	return r
}

// pigeon runs a command line against r and returns its exit code and output.
func (r *running) pigeon(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	if r != nil && len(args) > 0 && args[0] != "audit" || len(args) > 1 && args[1] == "tail" {
		args = append(args, "--url", r.url)
	}
	var stdout, stderr bytes.Buffer
	code := Main(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// The README quickstart, request for request, run twice as its text says it
// can be: negotiate (stopping with the real error when that fails), one
// valid payment, one violation, and the auditor's quarantine list.
func TestQuickstart(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	// The README's extraction of the contract id, and its fresh keys.
	const sedExpr = `s/^[{]"contract":[{]"id":"([^"]+)".*/\1/p`
	for _, want := range []string{"sh -e <<'EOF'", "run=$(date +%s)-$$", sedExpr, `[ -n "$CONTRACT" ] || { echo "negotiate failed: $resp" >&2; exit 1; }`,
		`"idempotencyKey":"pay-'$run'-1"`, `"idempotencyKey":"pay-'$run'-2"`, "curl -sS localhost:8787/v1/quarantine -H 'authorization: Bearer auditor-token'"} {
		require.Contains(t, string(readme), want, "the test follows the README")
	}
	contractID := regexp.MustCompile(`^[{]"contract":[{]"id":"([^"]+)"`)

	r := startServe(t, serveConfig{})
	out := r.out.String()
	require.Contains(t, out, "DEMO MODE")
	require.Contains(t, out, r.url+"/health")
	require.Contains(t, out, "ws://"+strings.TrimPrefix(r.url, "http://")+"/v1/ws")

	send := func(method, path, body string, headers ...string) (int, string) {
		req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// $(...) drops the trailing newline; sed reads one line.
		return resp.StatusCode, strings.TrimSuffix(string(b), "\n")
	}

	// A refused negotiate leaves CONTRACT empty: the block stops and
	// prints the error body, instead of sending it on as a contract id.
	status, body := send(http.MethodPost, "/v1/contracts", `{"subjects":["payments.authorize"]}`,
		"authorization", "Bearer catalog-token", "content-type", "application/json")
	require.Equal(t, http.StatusForbidden, status)
	require.Nil(t, contractID.FindStringSubmatch(body))
	require.Contains(t, body, "NO_PERMITTED_SUBJECTS")

	for i, run := range []string{"1796092966-4242", "1796092966-4243"} {
		// 1. negotiate
		status, body := send(http.MethodPost, "/v1/contracts", `{"subjects":["payments.authorize"]}`,
			"authorization", "Bearer checkout-token", "content-type", "application/json")
		require.Equal(t, http.StatusCreated, status)
		m := contractID.FindStringSubmatch(body)
		require.NotNil(t, m, "the README's sed finds the id: %s", body)
		contract := m[1]
		require.True(t, strings.HasPrefix(contract, "ctr_"), contract)

		// 2. one valid payment (curl -d sends application/x-www-form-urlencoded)
		status, body = send(http.MethodPost, "/v1/messages", `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",
       "idempotencyKey":"pay-`+run+`-1","classification":"pci",
       "data":{"merchantId":"m-1","orderId":"o-`+run+`-1","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}}`,
			"authorization", "Bearer checkout-token", "x-pigeon-contract", contract, "content-type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusAccepted, status, "run %d: %s", i+1, body)
		require.Contains(t, body, `"status":"accepted"`)

		// 3. a violation
		status, body = send(http.MethodPost, "/v1/messages", `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",
       "idempotencyKey":"pay-`+run+`-2","classification":"pci",
       "data":{"merchantId":"m-1","orderId":"o-`+run+`-2","amount":10,"currency":"GBP","paymentToken":"tok_x","card":{"pan":"4111111111111111"}}}`,
			"authorization", "Bearer checkout-token", "x-pigeon-contract", contract, "content-type", "application/x-www-form-urlencoded")
		require.Equal(t, http.StatusUnprocessableEntity, status)
		require.Contains(t, body, `"code":"SENSITIVE_FIELD_DENIED"`)
		require.Contains(t, body, `"quarantineId":"qr_`)

		// 4. the auditor lists the quarantine: one more record per run
		status, body = send(http.MethodGet, "/v1/quarantine", "", "authorization", "Bearer auditor-token")
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, i+1, strings.Count(body, `"pan":"[REDACTED]"`), body)
		require.NotContains(t, body, "4111111111111111")
	}

	r.stop()
	require.Contains(t, r.out.String(), "stopped cleanly")
	code, stdout, stderr := r.pigeon(t, context.Background(), "audit", "verify", "--data", r.data)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "holds")
}

func TestClientCommands(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte(`tokens:
  - token: orders-token
    principal: spiffe://merchant-prod/ns/orders/sa/orders-api
  - token: notifier-token
    principal: spiffe://merchant-prod/ns/notify/sa/notifier-worker
  - token: checkout-token
    principal: spiffe://merchant-prod/ns/checkout/sa/checkout-api
    roles: [auditor]
`), 0o600))
	r := startServe(t, serveConfig{tokens: tokens})
	require.Contains(t, r.out.String(), "3 bearer tokens from")
	require.NotContains(t, r.out.String(), "notifier-token", "tokens from a file are never printed")
	ctx := context.Background()

	// subscribe streams deliveries as JSON lines until interrupted.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := &testlog.Buffer{}
	subDone := make(chan int, 1)
	go func() {
		subDone <- Main(sctx, []string{"subscribe", "--url", r.url, "--token", "notifier-token", "--subject", "notifications.send", "--start", "first"}, lines, io.Discard)
	}()

	code, stdout, stderr := r.pigeon(t, ctx, "publish", "--token", "orders-token", "--subject", "notifications.send",
		"--type", "notification.requested", "--intent", "send_notification", "--key", "k-1", "--classification", "pii",
		"--data", `{"recipientId":"cust-42","channel":"email","templateId":"order-shipped"}`)
	require.Equal(t, 0, code, stderr)
	var res struct {
		Status  string
		Message struct{ ID string }
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Equal(t, "accepted", res.Status)

	msgFile := filepath.Join(dir, "msg.json")
	require.NoError(t, os.WriteFile(msgFile, []byte(`{"type":"notification.requested","subject":"notifications.send","intent":"send_notification",
		"idempotencyKey":"k-2","classification":"pii","data":{"recipientId":"cust-42","channel":"sms","templateId":"t","recipient":{"ssn":"078-05-1120"}}}`), 0o600))
	code, _, stderr = r.pigeon(t, ctx, "publish", "--token", "orders-token", "--file", msgFile)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "SENSITIVE_FIELD_DENIED")
	require.NotContains(t, stderr, "078-05-1120")

	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(lines.String(), res.Message.ID) {
		require.True(t, time.Now().Before(deadline), "subscribe printed %q", lines.String())
		time.Sleep(10 * time.Millisecond)
	}
	var line struct {
		Subject string
		Attempt int
		Message struct{ ID string }
	}
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(lines.String(), "\n", 2)[0]), &line))
	require.Equal(t, "notifications.send", line.Subject)
	require.Equal(t, 1, line.Attempt)
	cancel()
	require.Equal(t, 0, <-subDone)

	code, stdout, stderr = r.pigeon(t, ctx, "quarantine", "list", "--token", "checkout-token")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1, strings.Count(stdout, "\n"))
	var rec struct{ ID, Code string }
	require.NoError(t, json.Unmarshal([]byte(stdout), &rec))
	require.Equal(t, "SENSITIVE_FIELD_DENIED", rec.Code)
	code, stdout, stderr = r.pigeon(t, ctx, "quarantine", "show", rec.ID, "--token", "checkout-token")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"ssn": "[REDACTED]"`)
	code, _, stderr = r.pigeon(t, ctx, "quarantine", "release", rec.ID, "--token", "checkout-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "NO_PERMITTED_SUBJECTS", "checkout may not publish notifications")
	code, _, stderr = r.pigeon(t, ctx, "quarantine", "list", "--token", "orders-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "FORBIDDEN")
	code, _, _ = r.pigeon(t, ctx, "quarantine", "show", "--token", "checkout-token")
	require.Equal(t, 2, code)
	// The id is one path segment: one that holds "/release" names no
	// record, not the release route.
	code, _, stderr = r.pigeon(t, ctx, "quarantine", "show", rec.ID+"/release", "--token", "checkout-token")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "NOT_FOUND", stderr)

	code, stdout, stderr = r.pigeon(t, ctx, "audit", "tail", "--token", "checkout-token", "--from", "1")
	require.Equal(t, 0, code, stderr)
	first := strings.SplitN(stdout, "\n", 2)[0]
	require.Contains(t, first, `"seq":1`)
	require.Contains(t, stdout, `"type":"quarantine.created"`)

	// Online (--url), the running server says who received the message:
	// in pages of one, then all at once.
	code, onePage, stderr := r.pigeon(t, ctx, "audit", "receipts", "--url", r.url, "--token", "checkout-token", "--max", "1", res.Message.ID)
	require.Equal(t, 3, code, "a dispatch and an ack: more than one: %s", stderr)
	require.Equal(t, 1, strings.Count(onePage, "\n"))
	next := regexp.MustCompile(`the next page is --after ([0-9]+:[0-9]+)`).FindStringSubmatch(stderr)
	require.NotNil(t, next, stderr)
	code, rest, stderr := r.pigeon(t, ctx, "audit", "receipts", "--url", r.url, "--token", "checkout-token", "--after", next[1], res.Message.ID)
	require.Equal(t, 0, code, stderr)
	code, online, stderr := r.pigeon(t, ctx, "audit", "receipts", "--url", r.url, "--token", "checkout-token", res.Message.ID)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, online, onePage+rest)
	code, _, stderr = r.pigeon(t, ctx, "audit", "receipts", "--url", r.url, "--token", "orders-token", res.Message.ID)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "FORBIDDEN")

	// Offline, the audit log says the same.
	r.stop()
	code, stdout, stderr = (*running)(nil).pigeon(t, ctx, "audit", "receipts", "--data", r.data, res.Message.ID)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, online, stdout, "online and offline agree")
	var receipt pigeon.Receipt
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &receipt))
	require.Equal(t, pigeon.EventDeliveryDispatched, receipt.Event)
	require.Equal(t, "spiffe://merchant-prod/ns/notify/sa/notifier-worker", receipt.Principal)
	require.False(t, receipt.Time.IsZero())
	code, _, stderr = (*running)(nil).pigeon(t, ctx, "audit", "receipts", "--data", r.data, "msg_nobody")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "no delivery")
}

func TestServeWithPolicies(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "policies"), demo.FS()))
	tokens := filepath.Join(dir, "tokens.json")
	require.NoError(t, os.WriteFile(tokens, []byte(`{"tokens":[{"token":"t1","principal":"spiffe://merchant-prod/ns/checkout/sa/checkout-api","attributes":{"team":"pay"}}]}`), 0o600))
	// A field the broker ignores is not silent: serve logs it as it starts.
	path := filepath.Join(dir, "policies", "subjects", "notifications.send.json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b = append(bytes.TrimRight(bytes.TrimSpace(b), "}"), `,"ackWaitMs":2000}`...)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	r := startServe(t, serveConfig{policies: filepath.Join(dir, "policies"), tokens: tokens, data: ""})
	require.NotContains(t, r.out.String(), "DEMO")
	require.Contains(t, r.errOut.String(), "policy: unknown field (ignored)")
	require.Contains(t, r.errOut.String(), "ackWaitMs")
	code, _, stderr := r.pigeon(t, context.Background(), "publish", "--token", "t1", "--subject", "payments.authorize",
		"--type", "payment.authorization.requested", "--intent", "authorize_payment", "--key", "p-1", "--classification", "pci",
		"--data", `{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok"}`)
	require.Equal(t, 0, code, stderr)

	err = serve(context.Background(), serveConfig{policies: filepath.Join(dir, "policies"), addr: "127.0.0.1:0", sync: "batch"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--tokens")
	err = serve(context.Background(), serveConfig{addr: "127.0.0.1:0", sync: "sometimes"}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--sync")
	err = serve(context.Background(), serveConfig{policies: filepath.Join(dir, "nope"), tokens: tokens, addr: "127.0.0.1:0", sync: "batch"}, io.Discard, io.Discard)
	require.Error(t, err)
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	toks, err := loadTokens(write("ok.yaml", "tokens:\n  - token: a\n    principal: spiffe://x/a\n    roles: [auditor]\n    attributes: {team: ops}\n"))
	require.NoError(t, err)
	require.Len(t, toks, 1)
	require.Equal(t, []string{"auditor"}, toks[0].Roles)
	require.Equal(t, "ops", toks[0].Attributes["team"])
	toks, err = loadTokens(write("ok.json", `{"tokens":[{"token":"a","principal":"p"},{"token":"b","principal":"q"}]}`))
	require.NoError(t, err)
	require.Len(t, toks, 2)
	for name, body := range map[string]string{
		"empty.yaml":     "tokens: []\n",
		"notoken.json":   `{"tokens":[{"principal":"p"}]}`,
		"noprin.json":    `{"tokens":[{"token":"a"}]}`,
		"dup.json":       `{"tokens":[{"token":"a","principal":"p"},{"token":"a","principal":"q"}]}`,
		"unknown.yaml":   "tokens:\n  - token: a\n    principle: p\n",
		"malformed.json": `{"tokens":`,
	} {
		_, err := loadTokens(write(name, body))
		require.Error(t, err, name)
	}
	_, err = loadTokens(filepath.Join(dir, "missing.yaml"))
	require.Error(t, err)
}

func TestPolicyLint(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, demo.FS()))
	code, stdout, _ := (*running)(nil).pigeon(t, context.Background(), "policy", "lint", dir)
	require.Equal(t, 0, code, stdout)
	require.Contains(t, stdout, "ok")

	bad := filepath.Join(dir, "subjects", "payments.authorize.json")
	b, err := fs.ReadFile(demo.FS(), "subjects/payments.authorize.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bad, bytes.Replace(b, []byte(`"effect": "allow"`), []byte(`"effect": "maybe"`), 1), 0o600))
	code, stdout, _ = (*running)(nil).pigeon(t, context.Background(), "policy", "lint", dir)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "error")
	code, _, _ = (*running)(nil).pigeon(t, context.Background(), "policy", "lint")
	require.Equal(t, 2, code)
}

func TestAuditVerifyFindsTampering(t *testing.T) {
	r := startServe(t, serveConfig{})
	r.stop()
	code, stdout, stderr := (*running)(nil).pigeon(t, context.Background(), "audit", "verify", "--data", r.data)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "records")
	segs, err := filepath.Glob(filepath.Join(r.data, "audit", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	b, err := os.ReadFile(segs[0])
	require.NoError(t, err)
	tampered := bytes.Replace(b, []byte("subject.registered"), []byte("subject.registerez"), 1)
	require.False(t, bytes.Equal(b, tampered), "the segment holds the record types")
	require.NoError(t, os.WriteFile(segs[0], tampered, 0o600))
	code, _, stderr = (*running)(nil).pigeon(t, context.Background(), "audit", "verify", "--data", r.data)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "does not hold")
}

func TestUsage(t *testing.T) {
	code, _, stderr := (*running)(nil).pigeon(t, context.Background())
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "usage")
	code, _, stderr = (*running)(nil).pigeon(t, context.Background(), "fly")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "unknown command")
	code, stdout, _ := (*running)(nil).pigeon(t, context.Background(), "help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "serve")
	code, _, _ = (*running)(nil).pigeon(t, context.Background(), "serve", "--nope")
	require.Equal(t, 2, code)
}
