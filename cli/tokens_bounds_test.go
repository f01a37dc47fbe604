package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A tokens file's principals, roles and attributes were served as
// written: an attribute of kilobytes or holding a newline or ESC, or a
// principal no account could bear, reached policy conditions, contracts,
// audit records and the console. Each entry is now checked with
// pigeon.StaticToken.Validate, and serve refuses to start, naming the
// entry and its principal, never its token.
func TestTokensFileHeldToTheDirectorysRules(t *testing.T) {
	const secret = "s3cr3t-Token-9"
	long := strings.Repeat("v", pigeon.MaxAttributeValueLength+1)
	for _, tc := range []struct {
		name  string
		entry string // the second entry of the file, after a valid one
		err   string // "": loaded
	}{
		{"valid", `{token: ` + secret + `, principal: "spiffe://x/ns/a/sa/b", roles: [reader], attributes: {team: ops, display: "Zoë"}}`, ""},
		{"the longest value", `{token: ` + secret + `, principal: svc-b, attributes: {team: ` + long[1:] + `}}`, ""},
		{"a value too long", `{token: ` + secret + `, principal: svc-b, attributes: {team: ` + long + `}}`, `tokens[1]: pigeon: INVALID_ARGUMENT: the static token of principal "svc-b": the value of attribute "team" is 1025 bytes, more than 1024`},
		{"a newline in a value", `{token: ` + secret + `, principal: svc-b, attributes: {team: "ops\nadmin"}}`, `principal "svc-b": the value of attribute "team" holds a control or formatting character`},
		{"ESC in a value", `{token: ` + secret + `, principal: svc-b, attributes: {team: "ops\e[2J"}}`, `principal "svc-b": the value of attribute "team" holds a control or formatting character`},
		{"a control character in a name", `{token: ` + secret + `, principal: svc-b, attributes: {"te\tam": ops}}`, `principal "svc-b": the attribute name "te\tam" holds a control or formatting character`},
		{"a newline in the principal", `{token: ` + secret + `, principal: "svc\nadmin"}`, `principal "svc\nadmin": the principal has a character outside letters`},
		{"a space in the principal", `{token: ` + secret + `, principal: "svc admin"}`, `principal "svc admin": the principal has a character outside letters`},
		{"a principal too long", `{token: ` + secret + `, principal: ` + strings.Repeat("p", pigeon.MaxIDLength+1) + `}`, `…: the principal must be 1 to 256 bytes`},
		{"a role that is no role name", `{token: ` + secret + `, principal: svc-b, roles: ["writer admin"]}`, `principal "svc-b": a role name has a character outside letters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tokens.yaml")
			require.NoError(t, os.WriteFile(path, []byte("tokens:\n  - {token: other-token, principal: svc-a}\n  - "+tc.entry+"\n"), 0o600))
			toks, err := loadTokens(path)
			if tc.err == "" {
				require.NoError(t, err)
				require.Len(t, toks, 2)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.NotContains(t, err.Error(), secret, "the token is not named")
			err = serve(context.Background(), serveConfig{tokens: path, addr: "127.0.0.1:0", sync: "batch"}, io.Discard, io.Discard)
			require.ErrorContains(t, err, tc.err, "serve does not start")
		})
	}
}
