package identity_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// signRaw signs payload, a JSON text written by hand, with key kid.
func (p *idp) signRaw(t *testing.T, kid, payload string) string {
	t.Helper()
	p.mu.Lock()
	k := p.keys[kid]
	p.mu.Unlock()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	require.NoError(t, err)
	jws, err := s.Sign([]byte(payload))
	require.NoError(t, err)
	tok, err := jws.CompactSerialize()
	require.NoError(t, err)
	return tok
}

// The JSON decoder turns a byte that is not UTF-8, and an escaped lone
// surrogate, into U+FFFD: subjects the identity provider tells apart
// ("a\ud800", "a\udc00", "a\xff", "a\ufffd") would be one principal, and
// one user could act as another. A principal claim holding U+FFFD, or a
// control character (NUL, a newline: never part of a name, and NUL
// separates the parts of the broker's keys), is refused; other text is
// kept as it is.
func TestOIDCPrincipalMustBeText(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	claims := func(sub string) string { // sub: a JSON string literal's contents, as written
		c := p.good("")
		delete(c, "sub")
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return `{"sub":"` + sub + `",` + strings.TrimPrefix(string(b), "{")
	}
	for _, tc := range []struct {
		name, sub string
		want      string // "": refused
	}{
		{"a byte that is not UTF-8", "user-\xff", ""},
		{"a lone high surrogate", `user-\ud800`, ""},
		{"a lone low surrogate", `user-\udc00`, ""},
		{"U+FFFD itself", `user-\ufffd`, ""},
		{"NUL", `user-\u0000`, ""},
		{"a newline", `user-\nadmin`, ""},
		{"DEL", `user-\u007f`, ""},
		{"a C1 control", `user-\u0085`, ""},
		{"ASCII", "user-1", "user-1"},
		{"other Unicode text", `j\u00fcrgen@b\u00fccher.example`, "jürgen@bücher.example"},
		{"a surrogate pair", `user-\ud83d\udc26`, "user-🐦"},
	} {
		pr, err := f.auth(p.signRaw(t, "ec-1", claims(tc.sub)))
		if tc.want != "" {
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, pr.ID, tc.name)
			continue
		}
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%s: accepted as %q", tc.name, func() string {
			if pr != nil {
				return pr.ID
			}
			return ""
		}())
		require.NotContains(t, err.Error(), "user-")
	}
}
