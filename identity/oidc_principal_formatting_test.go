package identity_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// A principal claim, and an issuer's principal prefix, hold no formatting
// character that reorders the text around it or breaks its line (U+202E
// shows "alice\u202Egnp.exe" as "aliceexe.png"), as the engine refuses in
// every name: the token is refused UNAUTHENTICATED, the issuer at
// configuration, and the refusal quotes neither. The zero width joiners
// and right-to-left scripts are text. Before, the issuer refused only
// control characters and U+FFFD in the claim, and left the refusal of the
// rest to the engine, which an identity.Chain used on its own does not
// consult.
func TestOIDCPrincipalHoldsNoFormattingCharacter(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	claims := func(sub string) string {
		c := p.good(sub)
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return string(b)
	}
	for _, r := range []string{"\u061c", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202e", "\u2066", "\u2069"} {
		pr, err := f.auth(p.signRaw(t, "ec-1", claims("user-alice"+r+"gnp.exe")))
		require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%q accepted as %+v", r, pr)
		require.Nil(t, pr)
		require.NotContains(t, err.Error(), "user-")

		_, err = identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
			JWKSURL: p.srv.URL + "/jwks", PrincipalPrefix: "partner" + r + ":"}}})
		require.Error(t, err, "a principal prefix with %q", r)
		require.False(t, strings.Contains(err.Error(), r), "the error quotes the prefix: %q", err)
	}
	for _, sub := range []string{"user-👩\u200d💻", "user-مرحبا", "user-می\u200cخواهم"} {
		pr, err := f.auth(p.signRaw(t, "ec-1", claims(sub)))
		require.NoError(t, err, "%q", sub)
		require.Equal(t, sub, pr.ID)
	}
}
