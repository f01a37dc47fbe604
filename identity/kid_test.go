package identity_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// A key set may give one kid to keys of different types, equivalent
// alternatives (RFC 7517, 4.5): an RSA key and an EC key, say. The token's
// key is the one of its kid that fits its algorithm, whichever the set
// lists first; a token whose algorithm no key of its kid fits is refused.
func TestOIDCOneKIDForTwoKeyTypes(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ed := newIDP(t) // for its claims, and a key the set does not hold
	ed.addKey(t, "shared", jose.EdDSA, false)
	pub := map[jose.SignatureAlgorithm]jose.JSONWebKey{
		jose.RS256: {Key: rsaKey.Public(), KeyID: "shared", Algorithm: string(jose.RS256), Use: "sig"},
		jose.ES256: {Key: ecKey.Public(), KeyID: "shared", Use: "sig"},
	}
	sign := func(alg jose.SignatureAlgorithm, key crypto.Signer) string {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "shared"))
		require.NoError(t, err)
		c := ed.good("user-1")
		b, err := json.Marshal(c)
		require.NoError(t, err)
		jws, err := s.Sign(b)
		require.NoError(t, err)
		tok, err := jws.CompactSerialize()
		require.NoError(t, err)
		return tok
	}
	for _, order := range [][]jose.SignatureAlgorithm{{jose.RS256, jose.ES256}, {jose.ES256, jose.RS256}} {
		t.Run(string(order[0])+" first", func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{pub[order[0]], pub[order[1]]}})
			}))
			defer srv.Close()
			m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: ed.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: srv.URL,
				Algorithms: []string{"RS256", "ES256", "EdDSA"}}}})
			require.NoError(t, err)
			for _, tc := range []struct {
				name   string
				tok    string
				accept bool
			}{
				{"RS256", sign(jose.RS256, rsaKey), true},
				{"ES256", sign(jose.ES256, ecKey), true},
				{"PS256, which the RSA key's alg excludes", sign(jose.PS256, rsaKey), false},
				{"EdDSA, which no key of the kid fits", ed.sign(t, "shared", ed.good("user-1")), false},
				{"ES256 signed with another key", func() string {
					other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
					require.NoError(t, err)
					return sign(jose.ES256, other)
				}(), false},
			} {
				p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tc.tok})
				if tc.accept {
					require.NoError(t, err, tc.name)
					require.Equal(t, "user-1", p.ID, tc.name)
					continue
				}
				require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%s: %v", tc.name, err)
			}
		})
	}
}
