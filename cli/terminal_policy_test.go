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
// often someone else's work. A subject named "notifications.send\u009b2J"
// was taken as its file gave it: `pigeon serve` named it raw in its
// banner, and `pigeon catalog asyncapi` wrote it raw in its JSON (JSON
// allows C1 controls and DEL unescaped), clearing the operator's terminal.
// Such a catalog is now refused, POLICY_INVALID, by both, and the refusal
// names the subject with Go escapes. (The banner and the document still
// escape what a terminal acts on: printable, terminalSafeJSON.)
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

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"serve", []string{"serve", "--policies", dir, "--tokens", tokens, "--data", "", "--addr", "127.0.0.1:0"}},
		{"catalog asyncapi", []string{"catalog", "asyncapi", dir}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var stdout, stderr lockedBuffer
			code := Main(ctx, tc.args, &stdout, &stderr)
			require.NotEqual(t, 0, code, "stdout %s", stdout.String())
			out := stdout.String() + stderr.String()
			requireTerminalSafe(t, out)
			require.NotContains(t, stdout.String(), "Ctrl-C", "the broker did not start")
			require.Contains(t, out, "control character", out)
			require.Contains(t, out, `notifications.send\u009b2J\x7f\u0085\x1b[8m`, out)
		})
	}
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
