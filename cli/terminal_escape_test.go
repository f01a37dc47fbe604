package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
)

// requireTerminalSafe fails when out holds a byte a terminal acts on: a
// C0 control other than tab and newline, DEL, a C1 control or a byte that
// is not UTF-8 (a lone 0x9b is CSI to an 8-bit terminal).
func requireTerminalSafe(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		bad := r < 0x20 && r != '\t' && r != '\n' || r == 0x7f || r >= 0x80 && r < 0xa0 ||
			r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD")
		require.False(t, bad, "byte %#x at %d of %q", out[i], i, out)
	}
}

// A policy directory is often someone else's work (a pull request that CI
// or a reviewer lints): a JSON key, a file name or a YAML value is theirs
// to choose. `policy lint`, `catalog asyncapi` and serve printed the
// problems they found in it raw, so an unknown field named
// "\u001b]0;…\u0007\u001b[2J" retitled and cleared the operator's
// terminal (any escape sequence could be sent: hidden text, a faked
// "ok"). What comes from the files is printed with its controls escaped.
func TestPolicyToolsEscapeControlCharacters(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file names with control characters")
	}
	dir := filepath.Join(t.TempDir(), "policies")
	require.NoError(t, os.CopyFS(dir, demo.FS()))
	file := filepath.Join(dir, "subjects", "payments.authorize.json")
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	const field = `"\u001b]0;owned\u0007\u001b[2J\u009b31m\r"`
	require.NoError(t, os.WriteFile(file, []byte(strings.Replace(string(b), `"principals"`, field, 1)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "subjects", "notes\x1b[8m\xff.txt"), []byte("x"), 0o644))

	tests := []struct {
		name string
		args []string
		code int
		want string // the escaped field, in stdout or stderr
	}{
		{"policy lint", []string{"policy", "lint", dir}, 1, `\x1b]0;owned\x07\x1b[2J\u009b31m\x0d`},
		{"catalog asyncapi", []string{"catalog", "asyncapi", dir}, 1, `\x1b]0;owned`},
		{"serve", []string{"serve", "--policies", dir, "--tokens", filepath.Join(dir, "none.yaml"), "--data", "", "--addr", "127.0.0.1:0"}, 1, `\x1b]0;owned`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // were serve to start, it stops at once
			var stdout, stderr strings.Builder
			code := Main(ctx, tt.args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			require.Equal(t, tt.code, code, out)
			requireTerminalSafe(t, out)
			require.Contains(t, out, tt.want)
			if tt.name == "policy lint" {
				require.Contains(t, out, `notes\x1b[8m\xff.txt`)
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, tabs\tand ünïcode ✓", "plain text, tabs\tand ünïcode ✓"},
		{"a\x1b[31mb", `a\x1b[31mb`},
		{"line\nforged", `line\x0aforged`},
		{"del\x7f c1\u009b raw\x9b bad\xff", `del\x7f c1\u009b raw\x9b bad\xff`},
		{"real \uFFFD stays", "real \uFFFD stays"},
	} {
		got := printable(tc.in)
		require.Equal(t, tc.want, got)
		requireTerminalSafe(t, got)
	}
}

// fakeChains is a Store whose VerifyAudit reports the chains it holds, as
// the nodes of a cluster name them.
type fakeChains struct{ chains []AuditChain }

func (f *fakeChains) Flags(*flag.FlagSet) {}
func (f *fakeChains) Open(context.Context, string, StoreEnv) (*OpenStore, error) {
	return nil, errors.New("not for serve")
}
func (f *fakeChains) VerifyAudit(context.Context, string) ([]AuditChain, error) { return f.chains, nil }

// What a server or a cluster's nodes send reached the operator's terminal
// raw: the body of an HTTP error (a proxy's page, a server of anyone's
// choosing behind --url), a 2xx answer that is not JSON, the name a
// cluster node gives itself and its chain's error. They are printed with
// their controls escaped.
func TestPeerTextEscapedOnTheTerminal(t *testing.T) {
	const evil = "\x1b]0;owned\x07\x1b[2J\r\n\x9b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/accounts/x" {
			_, _ = io.WriteString(w, "not json "+evil)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html>"+evil+"</html>")
	}))
	defer srv.Close()
	cluster := WithStore(&fakeChains{chains: []AuditChain{
		{Node: "n1" + evil, Records: 3},
		{Node: "n2" + evil, Records: 1, Err: errors.New("cut" + evil)},
	}}, "fake")

	tests := []struct {
		name string
		args []string
		opts []Option
		code int
	}{
		{"2xx not JSON", []string{"account", "show", "x", "--url", srv.URL, "--token", "t"}, nil, 0},
		{"HTTP error page", []string{"role", "list", "--url", srv.URL, "--token", "t"}, nil, 1},
		{"cluster node names", []string{"audit", "verify", "--store", "fake://x"}, []Option{cluster}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(context.Background(), tt.args, &stdout, &stderr, tt.opts...)
			out := stdout.String() + stderr.String()
			require.Equal(t, tt.code, code, out)
			requireTerminalSafe(t, strings.ReplaceAll(out, "\n", " ")+"\n")
			require.Contains(t, out, `\x1b]0;owned\x07\x1b[2J\x0d\x0a\x9b`)
		})
	}
}
