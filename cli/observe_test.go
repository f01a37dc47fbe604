package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	return send(t, http.MethodGet, url, token, "")
}

// send makes one request with token (none when empty) and a JSON body
// (none when empty), and returns the status and body of the answer.
func send(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

// TestServeMetricsOnTheirOwnAddress: with --metrics-addr, /metrics is
// served there (and not on --addr), the JSON log lines carry request ids,
// and the console and API page are on --addr.
func TestServeMetricsOnTheirOwnAddress(t *testing.T) {
	r := startServe(t, serveConfig{metricsAddr: "127.0.0.1:0", logFormat: "json", logLevel: "debug"})
	m := regexp.MustCompile(`pigeon: metrics +(\S+)`).FindStringSubmatch(r.out.String())
	require.Len(t, m, 2, "the banner names the metrics URL: %s", r.out.String())
	require.NotContains(t, m[1], r.url)

	code, _ := get(t, r.url+"/v1/subjects", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, r.url+"/v1/audit", "not-a-token")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body := get(t, m[1], "")
	require.Equal(t, http.StatusOK, code)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	require.Contains(t, fams, "pigeon_auth_failures_total")
	require.Contains(t, fams, "pigeon_audit_records")
	require.Contains(t, fams, "go_goroutines")
	code, _ = get(t, r.url+"/metrics", "")
	require.Equal(t, http.StatusNotFound, code, "not on the main listener")
	code, page := get(t, r.url+"/", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(page), "Pigeon console")

	r.stop()
	lines := 0
	for line := range strings.SplitSeq(strings.TrimSpace(r.errOut.String()), "\n") {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), "a JSON line: %s", line)
		if v["msg"] == "http request" {
			require.NotEmpty(t, v["request_id"], line)
			lines++
		}
	}
	require.GreaterOrEqual(t, lines, 3)
	require.NotContains(t, r.errOut.String(), "not-a-token")
}

func TestServeMetricsOnTheMainAddress(t *testing.T) {
	r := startServe(t, serveConfig{})
	code, body := get(t, r.url+"/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "pigeon_audit_records")
	require.Contains(t, r.out.String(), "pigeon: metrics    "+r.url+"/metrics")
}

func TestServeRefusesABadLogFlag(t *testing.T) {
	for _, cfg := range []serveConfig{{logFormat: "xml"}, {logLevel: "loud"}} {
		cfg.addr, cfg.sync = "127.0.0.1:0", "batch"
		err := serve(context.Background(), cfg, io.Discard, io.Discard)
		require.ErrorContains(t, err, "--log-")
	}
}

func TestCatalogAsyncAPI(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(dir, "policies"), demo.FS()))
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"catalog", "asyncapi", filepath.Join(dir, "policies")}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	var doc struct {
		AsyncAPI string                    `json:"asyncapi"`
		Channels map[string]map[string]any `json:"channels"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &doc))
	require.Equal(t, "3.0.0", doc.AsyncAPI)
	require.Equal(t, "notifications.send", doc.Channels["notifications.send"]["address"])

	code = Main(context.Background(), []string{"catalog", "asyncapi"}, io.Discard, &stderr)
	require.Equal(t, 2, code)
	code = Main(context.Background(), []string{"catalog", "asyncapi", filepath.Join(dir, "nope")}, io.Discard, io.Discard)
	require.Equal(t, 1, code)
}

func TestConfigFileOperationsKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(path, []byte("log_format: json\nlog_level: warn\nmetrics_addr: 127.0.0.1:9464\n"), 0o600))
	cfg, code, ok := parseServe([]string{"--config", path, "--log-level", "debug"}, io.Discard, nil)
	require.True(t, ok, "exit %d", code)
	require.Equal(t, "json", cfg.logFormat)
	require.Equal(t, "debug", cfg.logLevel, "a flag wins over the file")
	require.Equal(t, "127.0.0.1:9464", cfg.metricsAddr)
}
