package identity_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// The issuer a token claims was read with encoding/json (the last of
// duplicate members wins, member names match without case) and its claims
// verified with go-jose's decoder (names case sensitive, a duplicate
// refused). A token holding "iss" twice, or "iss" and "ISS", was judged
// as one issuer's and verified by that issuer's keys while its claims
// said another: a payload of "iss" A then "ISS" B, signed by A, went to
// B's keys; one naming B only as "ISS" fetched B's keys for a token that
// claims no issuer. Both now read the claims alike: "ISS" is just another
// claim, a duplicate member leaves the token unrecognized, and no key of
// an issuer the verified claims do not name is ever fetched.
func TestIssuerReadAsVerified(t *testing.T) {
	a, b := newIDP(t), newIDP(t)
	a.addKey(t, "a-1", jose.RS256, true)
	b.addKey(t, "b-1", jose.RS256, true)
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{
		{URL: a.srv.URL, JWKSURL: a.srv.URL + "/jwks", Audiences: []string{"pigeon"}, PrincipalPrefix: "a:"},
		{URL: b.srv.URL, JWKSURL: b.srv.URL + "/jwks", Audiences: []string{"pigeon"}, PrincipalPrefix: "b:"},
	}})
	require.NoError(t, err)
	now := time.Now().Unix()
	rest := `"aud":"pigeon","sub":"user-1","iat":` + strconv.FormatInt(now, 10) + `,"exp":` + strconv.FormatInt(now+600, 10)
	q := strconv.Quote
	for _, tc := range []struct {
		name    string
		signer  *idp
		kid     string
		payload string
		want    string // the principal; "": not recognized by any issuer
	}{
		{"iss, then ISS of another issuer", a, "a-1", `{"iss":` + q(a.srv.URL) + `,"ISS":` + q(b.srv.URL) + `,` + rest + `}`, "a:user-1"},
		{"ISS alone", b, "b-1", `{"ISS":` + q(b.srv.URL) + `,` + rest + `}`, ""},
		{"Iss alone", b, "b-1", `{"Iss":` + q(b.srv.URL) + `,` + rest + `}`, ""},
		{"iss twice", b, "b-1", `{"iss":` + q(a.srv.URL) + `,"iss":` + q(b.srv.URL) + `,` + rest + `}`, ""},
		{"iss twice, the same", b, "b-1", `{"iss":` + q(b.srv.URL) + `,"iss":` + q(b.srv.URL) + `,` + rest + `}`, ""},
		{"an escaped iss", a, "a-1", `{"\u0069ss":` + q(a.srv.URL) + `,` + rest + `}`, "a:user-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.fetches.Load()
			tok := tc.signer.signRaw(t, tc.kid, tc.payload)
			p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
			if tc.want == "" {
				require.ErrorIs(t, err, pigeon.ErrUnrecognized)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.want, p.ID)
			}
			require.Equal(t, before, b.fetches.Load(), "the keys of an issuer the verified claims do not name are not fetched")
		})
	}
}
