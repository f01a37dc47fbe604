package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/wal"
)

// serve --max-auth-failures and --auth-failure-window (or
// auth.max_failures and auth.failure_window in the config file) set when
// an address that keeps presenting refused credentials is locked out:
// parsed from either, negative refused, and in force on a real listener,
// where after the limit even a valid token from that address is answered
// 429 with Retry-After, and the refusals are in the audit log.
func TestServeAuthFailureLimit(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--max-auth-failures", "3", "--auth-failure-window", "2m"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 3, cfg.maxFailures)
	require.Equal(t, 2*time.Minute, cfg.failureWindow)
	for _, args := range [][]string{{"--max-auth-failures", "-1"}, {"--auth-failure-window", "-1s"}, {"--max-auth-failures", "many"}} {
		_, code, ok := parseServe(args, io.Discard, nil)
		require.False(t, ok, "%v", args)
		require.Equal(t, 2, code)
	}
	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("auth:\n  max_failures: 4\n  failure_window: 90s\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 4, cfg.maxFailures)
	require.Equal(t, 90*time.Second, cfg.failureWindow)

	r := startServe(t, serveConfig{maxFailures: 2, failureWindow: time.Minute})
	get := func(token string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, r.url+"/v1/quarantine", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp
	}
	require.Equal(t, http.StatusOK, get("auditor-token").StatusCode)
	for i := range 2 {
		require.Equal(t, http.StatusUnauthorized, get("guess-"+strconv.Itoa(i)).StatusCode)
	}
	resp := get("auditor-token")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 60, "Retry-After %d", retry)
	r.stop()

	st, err := wal.Open(r.data, nil)
	require.NoError(t, err)
	defer st.Close(context.Background())
	recs, err := st.ReadAudit(context.Background(), 0, 0)
	require.NoError(t, err)
	refusals := map[string]int{} // code → refusals the auth.failed records stand for
	for _, rec := range recs {
		require.NotContains(t, rec.Ref, "guess")
		require.NotContains(t, rec.Ref, "auditor-token")
		if rec.Type != string(pigeon.EventAuthFailed) {
			continue
		}
		n := 1
		if rest, ok := strings.CutPrefix(rec.Ref, "coalesced:"); ok {
			count, ref, _ := strings.Cut(rest, " ")
			n, err = strconv.Atoi(count)
			require.NoError(t, err)
			rec.Ref = ref
		}
		require.Equal(t, "auth:token from 127.0.0.1", rec.Ref)
		refusals[rec.Code] += n
	}
	require.Equal(t, map[string]int{string(pigeon.CodeUnauthenticated): 2, string(pigeon.CodeRateLimited): 1}, refusals)
}

// Over TLS, a refused bearer token counts once toward the lockout, in the
// engine, and not toward the limit on failed handshakes as well: with
// --max-auth-failures N, N-1 refusals on fresh connections lock nothing
// out, and the N-th locks the address out in the engine: a connection
// opened before is answered 429 with Retry-After, and a fresh one is
// closed as it is accepted, before its handshake.
func TestServeTLSRefusedTokenCountsOnce(t *testing.T) {
	dir := t.TempDir()
	writeTestPKI(t, dir, nil)
	const limit = 3
	r := startServe(t, serveConfig{tlsCert: filepath.Join(dir, "server.pem"), tlsKey: filepath.Join(dir, "server-key.pem"),
		maxFailures: limit, failureWindow: time.Minute})
	url := strings.Replace(r.url, "http://", "https://", 1)
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	// A fresh connection, so a fresh handshake, for every request.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	// One connection kept open throughout, opened before the lockout.
	kept := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer kept.CloseIdleConnections()
	send := func(c *http.Client, token string) (*http.Response, error) {
		req, err := http.NewRequest(http.MethodGet, url+"/v1/quarantine", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp, nil
	}
	get := func(c *http.Client, token string) *http.Response {
		t.Helper()
		resp, err := send(c, token)
		require.NoError(t, err, "the handshake is not refused for refused tokens")
		return resp
	}
	require.Equal(t, http.StatusOK, get(kept, "auditor-token").StatusCode)
	for i := range limit - 1 {
		require.Equal(t, http.StatusUnauthorized, get(hc, "guess-"+strconv.Itoa(i)).StatusCode)
	}
	require.Equal(t, http.StatusOK, get(hc, "auditor-token").StatusCode, "N-1 refusals do not lock out")
	require.Equal(t, http.StatusUnauthorized, get(hc, "guess-last").StatusCode)
	resp := get(kept, "auditor-token")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the N-th refusal locks out")
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 60, "Retry-After %d", retry)
	_, err = send(hc, "auditor-token")
	require.Error(t, err, "a fresh connection from the locked-out address is closed before its handshake")
}
