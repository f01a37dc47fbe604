package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// writeSecret writes a token file of mode 0600 and returns its path.
func writeSecret(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "metrics.token")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// With --metrics-token-file, /metrics answers only the token, on the main
// listener and on a listener of its own; the rest of the API is as before.
func TestServeMetricsToken(t *testing.T) {
	const token = "scrape-0123456789abcdef"
	for _, own := range []bool{false, true} {
		t.Run(map[bool]string{false: "main listener", true: "metrics-addr"}[own], func(t *testing.T) {
			cfg := serveConfig{metricsTokenFile: writeSecret(t, token+"\n")}
			if own {
				cfg.metricsAddr = "127.0.0.1:0"
			}
			r := startServe(t, cfg)
			m := regexp.MustCompile(`pigeon: metrics +(\S+)`).FindStringSubmatch(r.out.String())
			require.Len(t, m, 2, r.out.String())
			for _, tc := range []struct {
				token  string
				status int
			}{
				{"", http.StatusUnauthorized},
				{"scrape-0123456789abcdeX", http.StatusUnauthorized},
				{"admin-token", http.StatusUnauthorized},
				{token, http.StatusOK},
			} {
				code, body := get(t, m[1], tc.token)
				require.Equal(t, tc.status, code, "token %q", tc.token)
				if tc.status == http.StatusOK {
					require.Contains(t, string(body), "pigeon_audit_records")
				} else {
					require.NotContains(t, string(body), "pigeon_")
				}
			}
			code, _ := get(t, r.url+"/health", "")
			require.Equal(t, http.StatusOK, code)
			r.stop()
			require.NotContains(t, r.errOut.String(), token)
		})
	}
}

// Without the flag /metrics stays open, as documented; a token file that
// is missing, empty, short, holds white space inside, or that anyone may
// write is refused at start, naming the flag and never the token.
func TestServeMetricsTokenFileRefused(t *testing.T) {
	r := startServe(t, serveConfig{})
	code, _ := get(t, r.url+"/metrics", "")
	require.Equal(t, http.StatusOK, code, "no token file: /metrics needs none")

	worldWritable := writeSecret(t, "scrape-0123456789abcdef")
	require.NoError(t, os.Chmod(worldWritable, 0o666))
	for name, path := range map[string]string{
		"missing":        filepath.Join(t.TempDir(), "nope"),
		"empty":          writeSecret(t, "\n"),
		"short":          writeSecret(t, "secret-123"),
		"two words":      writeSecret(t, "scrape-0123456789 abcdef"),
		"world-writable": worldWritable,
	} {
		cfg := serveConfig{addr: "127.0.0.1:0", sync: "batch", data: filepath.Join(t.TempDir(), "d"), metricsTokenFile: path}
		err := serve(context.Background(), cfg, io.Discard, io.Discard)
		require.ErrorContains(t, err, "--metrics-token-file", name)
		require.NotContains(t, err.Error(), "0123456789", name)
	}
}

func TestConfigFileMetricsTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pigeon.yaml")
	require.NoError(t, os.WriteFile(path, []byte("metrics_token_file: secrets/metrics.token\n"), 0o600))
	cfg, code, ok := parseServe([]string{"--config", path}, io.Discard, nil)
	require.True(t, ok, "exit %d", code)
	require.Equal(t, filepath.Join(dir, "secrets", "metrics.token"), cfg.metricsTokenFile, "relative to the config file")

	cfg, code, ok = parseServe([]string{"--config", path, "--metrics-token-file", "/run/secrets/m"}, io.Discard, nil)
	require.True(t, ok, "exit %d", code)
	require.Equal(t, "/run/secrets/m", cfg.metricsTokenFile, "a flag wins over the file")
}
