package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

// TestServeAndCatalogPrintPolicyNamesTerminalSafe: a policy directory is
// often someone else's work, and the catalog takes a subject's name as
// its file gives it, controls and all. `pigeon serve` named the subjects
// it serves in its banner raw, and `pigeon catalog asyncapi` wrote them
// raw in its JSON (JSON allows C1 controls and DEL unescaped), so a
// subject named "notifications.send\u009b2J" cleared the operator's
// terminal when it served or exported the catalog. The banner writes the
// name with Go escapes (printable), the document as the same JSON with
// JSON escapes.
func TestServeAndCatalogPrintPolicyNamesTerminalSafe(t *testing.T) {
	const name = "notifications.send" + "\u009b2J\x7f\u0085" + "\x1b[8m"
	dir := filepath.Join(t.TempDir(), "policies")
	require.NoError(t, os.CopyFS(dir, demo.FS()))
	file := filepath.Join(dir, "subjects", "notifications.send.json")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	quoted, err := json.Marshal(name) // ESC escaped, the rest raw
	require.NoError(t, err)
	b = bytes.Replace(b, []byte(`"name": "notifications.send"`), append([]byte(`"name": `), quoted...), 1)
	require.NoError(t, os.WriteFile(file, b, 0o644))
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte("tokens:\n- token: t\n  principal: p\n"), 0o600))

	t.Run("serve banner", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stdout, stderr lockedBuffer
		done := make(chan int, 1)
		go func() {
			done <- Main(ctx, []string{"serve", "--policies", dir, "--tokens", tokens, "--data", "", "--addr", "127.0.0.1:0"}, &stdout, &stderr)
		}()
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "Ctrl-C") }, 10*time.Second, 10*time.Millisecond, "stderr %s", stderr.String())
		cancel()
		require.Equal(t, 0, <-done, "stderr %s", stderr.String())
		requireTerminalSafe(t, stdout.String()+stderr.String())
		require.Contains(t, stdout.String(), `(notifications.send\u009b2J\x7f\u0085\x1b[8m, payments.authorize)`)
	})

	t.Run("catalog asyncapi", func(t *testing.T) {
		var stdout, stderr strings.Builder
		code := Main(t.Context(), []string{"catalog", "asyncapi", dir}, &stdout, &stderr)
		require.Equal(t, 0, code, "stderr %s", stderr.String())
		requireTerminalSafe(t, stdout.String()+stderr.String())
		var doc struct {
			Channels map[string]struct {
				Address string `json:"address"`
			} `json:"channels"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout.String()), &doc))
		var addrs []string
		for _, c := range doc.Channels {
			addrs = append(addrs, c.Address)
		}
		require.Contains(t, addrs, name, stdout.String())
	})
}

// TestServeLogsTerminalSafe: serve's log lines carry others' text: a
// program's log line is its deployer's message, kept as it wrote it. As
// JSON (--log-format json) slog writes DEL, C1 controls (U+009B is CSI)
// and NEL raw in a string, and as text it quotes C1 controls but writes
// DEL raw. Each record is now written terminal-safe: JSON as the same
// JSON, text with the DEL escaped.
func TestServeLogsTerminalSafe(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := newLogger(serveConfig{logFormat: format}, &buf)
			require.NoError(t, err)
			logger.Info(hostileText+"\xff", "program", hostileText+"\xff")
			logger.Info("del\x7f", "v", "a\x7fb") // text quotes none of it
			out := buf.String()
			requireTerminalSafe(t, out)
			require.Equal(t, 2, strings.Count(out, "\n"), out)
			if format == "json" {
				var rec map[string]any
				line, _, _ := strings.Cut(out, "\n")
				require.NoError(t, json.Unmarshal([]byte(line), &rec))
				require.Equal(t, hostileText+"\uFFFD", rec["msg"])
				require.Equal(t, hostileText+"\uFFFD", rec["program"])
			}
		})
	}
}
