package identity_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// A numeric attribute claim was decoded as a float64, which holds integers
// exactly only up to 2^53: tenant or organization ids beyond it (64-bit
// snowflake ids, say) that the identity provider tells apart became one
// attribute value, so a policy naming one tenant admitted the users of
// another. An integer is kept digit for digit; a number written with a
// fraction or an exponent whose value is beyond 2^53 is dropped (its digits
// are not known); other numbers read as before.
func TestOIDCNumericAttributesKeepTheirDigits(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	for _, tc := range []struct {
		literal string
		want    string // "": no attribute
	}{
		{"9007199254740993", "9007199254740993"}, // 2^53 + 1: a float64 makes it 2^53
		{"9007199254740992", "9007199254740992"},
		{"1234567890123456789", "1234567890123456789"},
		{"-9223372036854775809", "-9223372036854775809"},
		{"123456789012345678901234567890", "123456789012345678901234567890"},
		{"42", "42"},
		{"-7", "-7"},
		{"-0", "0"},
		{"1.5", "1.5"},
		{"1e3", "1000"},
		{"2.50", "2.5"},
		{"9007199254740993.0", ""},
		{"9.007199254740993e15", ""},
		{"1e21", ""},
		{"1e400", ""},
	} {
		c := p.good("user-1")
		c["team"] = json.Number(tc.literal)
		pr, err := f.auth(p.sign(t, "rsa-1", c))
		require.NoError(t, err, tc.literal)
		got, ok := pr.Attributes["team"]
		if tc.want == "" {
			require.False(t, ok, "%s: got %q", tc.literal, got)
			continue
		}
		require.True(t, ok, tc.literal)
		require.Equal(t, tc.want, got, tc.literal)
	}
	// Two tenants one past 2^53 apart are two attribute values.
	a := p.good("user-a")
	a["team"] = json.Number("9007199254740993")
	b := p.good("user-b")
	b["team"] = json.Number("9007199254740992")
	pa, err := f.auth(p.sign(t, "rsa-1", a))
	require.NoError(t, err)
	pb, err := f.auth(p.sign(t, "rsa-1", b))
	require.NoError(t, err)
	require.NotEqual(t, pa.Attributes["team"], pb.Attributes["team"])
}

// An identity provider lets its users give any e-mail address (a sign-up
// form, a profile page, the admin of another tenant), and says in
// email_verified whether it checked it. With principal_claim email, a
// token of a user who signed up as victim@example.com, unverified, signed
// in as that principal, and with an attribute claim email its policy
// conditions matched. A principal or attribute claim email (phone_number)
// counts only with email_verified (phone_number_verified) true (JSON true,
// or the string "true" some providers send); without it the principal is
// refused and the attribute dropped.
func TestOIDCUnverifiedContactClaims(t *testing.T) {
	p := newIDP(t)
	p.addKey(t, "rsa-1", jose.RS256, true)
	issuer := func(claim string) *identity.OIDC {
		m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{
			URL: p.srv.URL, JWKSURL: p.srv.URL + "/jwks", Audiences: []string{"pigeon"}, PrincipalClaim: claim,
			AttributeClaims: map[string]string{"mail": "email", "phone": "phone_number", "team": "team"},
		}}})
		require.NoError(t, err)
		return m
	}
	byEmail, bySub, byPhone := issuer("email"), issuer("sub"), issuer("phone_number")
	token := func(claims map[string]any) string {
		c := p.good("user-1")
		c["email"], c["phone_number"] = "victim@example.com", "+15550100"
		for k, v := range claims {
			if v == nil {
				delete(c, k)
				continue
			}
			c[k] = v
		}
		return p.sign(t, "rsa-1", c)
	}
	for _, tc := range []struct {
		name     string
		claims   map[string]any
		verified bool
	}{
		{"verified", map[string]any{"email_verified": true, "phone_number_verified": true}, true},
		{"verified, as a string", map[string]any{"email_verified": "true", "phone_number_verified": "true"}, true},
		{"not verified", map[string]any{"email_verified": false, "phone_number_verified": false}, false},
		{"not verified, as a string", map[string]any{"email_verified": "false", "phone_number_verified": "false"}, false},
		{"verified said otherwise", map[string]any{"email_verified": 1, "phone_number_verified": "True"}, false},
		{"not said", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := token(tc.claims)
			for _, m := range []struct {
				o  *identity.OIDC
				id string
			}{{byEmail, "victim@example.com"}, {byPhone, "+15550100"}} {
				pr, err := m.o.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
				if tc.verified {
					require.NoError(t, err)
					require.Equal(t, m.id, pr.ID)
					continue
				}
				require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%v", err)
				require.Nil(t, pr)
			}
			// Another principal claim signs in; the contact attributes
			// count only when verified.
			pr, err := bySub.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
			require.NoError(t, err)
			require.Equal(t, "user-1", pr.ID)
			require.Equal(t, "payments", pr.Attributes["team"])
			if tc.verified {
				require.Equal(t, map[string]string{"mail": "victim@example.com", "phone": "+15550100", "team": "payments"}, pr.Attributes)
				return
			}
			require.Equal(t, map[string]string{"team": "payments"}, pr.Attributes)
		})
	}
}
