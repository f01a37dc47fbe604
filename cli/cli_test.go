package cli

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
)

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--help"}, {"serve", "-h"}, {"broker", "start", "--help"}, {"demo", "--help"},
		{"publish", "--help"}, {"subscribe", "-h"}, {"quarantine", "list", "--help"}, {"audit", "tail", "-h"},
		{"subject", "purge", "--help"}, {"grant", "issue", "--help"}, {"grant", "revoke", "-h"}, {"account", "list", "--help"},
		{"account", "show", "-h"}, {"account", "create", "--help"}, {"account", "role", "add", "-h"}, {"account", "role", "remove", "--help"},
		{"role", "list", "-h"}, {"role", "put", "--help"}, {"role", "delete", "-h"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(context.Background(), args, &stdout, &stderr)
			require.Equal(t, 0, code, stderr.String())
			require.Contains(t, stderr.String(), "sage")
		})
	}
	code, _, _ := (*running)(nil).pigeon(t, context.Background(), "serve", "--nope")
	require.Equal(t, 2, code, "a bad flag is still a usage error")
}

// The reference broker's environment sets serve's defaults; a flag given
// on the command line wins.
func TestServeEnvironment(t *testing.T) {
	t.Setenv("PORT", "9911")
	t.Setenv("PIGEON_DATA_DIR", "/tmp/pigeon-env-data")
	cfg, _, ok := parseServe(nil, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, "127.0.0.1:9911", cfg.addr)
	require.Equal(t, "/tmp/pigeon-env-data", cfg.data)
	cfg, _, ok = parseServe([]string{"--addr", "127.0.0.1:7000", "--data", "./here"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, "127.0.0.1:7000", cfg.addr)
	require.Equal(t, "./here", cfg.data)

	t.Setenv("PIGEON_URL", "http://pigeon.example:1234")
	t.Setenv("PIGEON_TOKEN", "env-token")
	for _, tc := range []struct {
		args       []string
		url, token string
	}{
		{nil, "http://pigeon.example:1234", "env-token"},
		{[]string{"--url", "http://flag:1", "--token", "flag-token"}, "http://flag:1", "flag-token"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		a := clientFlags(fs)
		require.NoError(t, fs.Parse(tc.args))
		require.Equal(t, tc.url, a.url)
		require.Equal(t, tc.token, a.token)
	}
}

// `pigeon broker start` is serve, on $PORT with its data in
// $PIGEON_DATA_DIR; a client finds it through $PIGEON_URL and
// $PIGEON_TOKEN, and publish fills the type from the subject.
func TestBrokerStartWithTheReferenceEnvironment(t *testing.T) {
	data := filepath.Join(t.TempDir(), "env-data")
	t.Setenv("PORT", "0")
	t.Setenv("PIGEON_DATA_DIR", data)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testlog.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"broker", "start", "--shutdown-timeout", "10s"}, out, io.Discard) }()
	health := regexp.MustCompile(`health\s+(http://127\.0\.0\.1:\d+)/health`)
	waitFor(t, "the banner", func() bool { return health.MatchString(out.String()) })
	url := health.FindStringSubmatch(out.String())[1]
	require.Contains(t, out.String(), "store: "+data)
	_, err := os.Stat(data)
	require.NoError(t, err, "the store is in $PIGEON_DATA_DIR")

	t.Setenv("PIGEON_URL", url)
	t.Setenv("PIGEON_TOKEN", "orders-token")
	code, stdout, stderr := (*running)(nil).pigeon(t, ctx, "publish", "--subject", "notifications.send",
		"--intent", "send_notification", "--key", "k-env", "--classification", "pii",
		"--data", `{"recipientId":"cust-42","channel":"email","templateId":"order-shipped"}`)
	require.Equal(t, 0, code, stderr)
	var res struct {
		Status  string
		Message struct{ Type, Source string }
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Equal(t, "accepted", res.Status)
	require.Equal(t, "notifications.send", res.Message.Type, "publish fills type from the subject")
	require.Equal(t, "spiffe://merchant-prod/ns/orders/sa/orders-api", res.Message.Source)

	cancel()
	require.Equal(t, 0, <-done)
}

func TestDemoNarrates(t *testing.T) {
	code, stdout, stderr := (*running)(nil).pigeon(t, context.Background(), "demo")
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"embedded broker", "accepted: message", "duplicate: the original", "NO_PERMITTED_SUBJECTS",
		"SENSITIVE_FIELD_DENIED", `"pan":"[REDACTED]"`, "RAW_PAN_DETECTED", "REPLAY_DENIED", "hash chain intact"} {
		require.Contains(t, stdout, want)
	}
	require.NotContains(t, stdout, "4111111111111111")
	code, _, _ = (*running)(nil).pigeon(t, context.Background(), "demo", "extra")
	require.Equal(t, 2, code)
}

// serve -v logs every request to stderr, as its help says.
func TestVerboseLogsRequests(t *testing.T) {
	r := startServe(t, serveConfig{verbose: true})
	resp, err := http.Get(r.url + "/v1/subjects/nope")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	waitFor(t, "the request log", func() bool {
		return strings.Contains(r.errOut.String(), `msg="http request" method=GET path=/v1/subjects/nope status=404`)
	})
	require.Contains(t, r.errOut.String(), `msg="http connection" state=new`)
}
