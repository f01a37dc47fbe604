package identity_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"pigeon/identity"

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

// Policies name mTLS workloads by their SPIFFE IDs, and an issuer's
// principal claim is whatever its tokens say: an identity provider for
// people (where a user may choose a name) whose token said
// "spiffe://merchant-prod/ns/ops/sa/admin" would act as that workload. An
// issuer asserts SPIFFE IDs (JWT-SVIDs) only of the trust domains it is
// configured for (Issuer.TrustDomains), and then only valid IDs with a
// path; any other principal claim starting "spiffe:" (in any case) is
// refused.
func TestOIDCSPIFFEIDsOnlyFromTheirTrustDomains(t *testing.T) {
	p := newIDP(t)
	p.addKey(t, "ec-1", jose.ES256, true)
	auth := func(t *testing.T, domains []string, sub string) (*pigeon.Principal, error) {
		m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
			JWKSURL: p.srv.URL + "/jwks", TrustDomains: domains}}})
		require.NoError(t, err)
		c := p.good("")
		c["sub"] = sub
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.signRaw(t, "ec-1", string(b)), RemoteAddr: "192.0.2.1:1234"})
	}
	for _, tc := range []struct {
		name    string
		domains []string
		sub     string
		ok      bool
	}{
		{"a workload's ID from an issuer of none", nil, "spiffe://merchant-prod/ns/ops/sa/admin", false},
		{"in another case", nil, "SPIFFE://merchant-prod/ns/ops/sa/admin", false},
		{"without slashes", nil, "spiffe:merchant-prod/ns/ops/sa/admin", false},
		{"a name from an issuer of none", nil, "alice@example.com", true},
		{"its own trust domain", []string{"merchant-prod"}, "spiffe://merchant-prod/ns/ops/sa/admin", true},
		{"another trust domain", []string{"merchant-prod"}, "spiffe://partner.example/ns/a/sa/b", false},
		{"the trust domain's own ID", []string{"merchant-prod"}, "spiffe://merchant-prod", false},
		{"an ID that is not valid", []string{"merchant-prod"}, "spiffe://Merchant-Prod/ns/a", false},
		{"a name from an issuer of one", []string{"merchant-prod"}, "alice@example.com", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := auth(t, tc.domains, tc.sub)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, tc.sub, pr.ID)
				return
			}
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "accepted: %v", pr)
		})
	}
}

// Two issuers whose tokens both say "sub":"alice" name one principal
// unless their principals are kept apart: a partner's identity provider
// could sign in as any user of the company's. Issuers listed together
// must have distinct principal prefixes (Issuer.PrincipalPrefix), which
// the principal claim is appended to; one issuer alone needs none.
func TestOIDCIssuersDoNotShareSubjects(t *testing.T) {
	a, b := newIDP(t), newIDP(t)
	a.addKey(t, "ec-a", jose.ES256, true)
	b.addKey(t, "ec-b", jose.ES256, true)
	issuer := func(p *idp, prefix string) identity.Issuer {
		return identity.Issuer{URL: p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: p.srv.URL + "/jwks", PrincipalPrefix: prefix}
	}
	for _, prefixes := range [][2]string{{"", ""}, {"corp:", "corp:"}} {
		_, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{issuer(a, prefixes[0]), issuer(b, prefixes[1])}})
		require.ErrorContains(t, err, "principal_prefix", "prefixes %q", prefixes)
	}
	_, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{issuer(a, "bad\x00prefix:")}})
	require.Error(t, err)

	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{issuer(a, ""), issuer(b, "partner:")}})
	require.NoError(t, err)
	auth := func(p *idp, kid string) string {
		c := p.good("")
		c["sub"] = "alice"
		body, err := json.Marshal(c)
		require.NoError(t, err)
		pr, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.signRaw(t, kid, string(body)), RemoteAddr: "192.0.2.1:1234"})
		require.NoError(t, err)
		return pr.ID
	}
	require.Equal(t, "alice", auth(a, "ec-a"))
	require.Equal(t, "partner:alice", auth(b, "ec-b"))
}

// Distinct prefixes are not enough when one starts the other: with a
// company issuer of no prefix beside a partner's of "partner:", the
// company's subject "partner:alice" (a user name its users choose, say)
// was the partner's alice; and "partner:" beside "partner:eu:" made one
// principal of "eu:alice" and "alice". A principal of one issuer that
// starts with a longer prefix of another is refused.
func TestOIDCPrincipalPrefixesDoNotShadow(t *testing.T) {
	a, b, c := newIDP(t), newIDP(t), newIDP(t)
	a.addKey(t, "ec-a", jose.ES256, true)
	b.addKey(t, "ec-b", jose.ES256, true)
	c.addKey(t, "ec-c", jose.ES256, true)
	issuer := func(p *idp, prefix string) identity.Issuer {
		return identity.Issuer{URL: p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: p.srv.URL + "/jwks", PrincipalPrefix: prefix}
	}
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{issuer(a, ""), issuer(b, "partner:"), issuer(c, "partner:eu:")}})
	require.NoError(t, err)
	auth := func(p *idp, kid, sub string) (*pigeon.Principal, error) {
		cl := p.good("")
		cl["sub"] = sub
		body, err := json.Marshal(cl)
		require.NoError(t, err)
		return m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.signRaw(t, kid, string(body)), RemoteAddr: "192.0.2.1:1234"})
	}
	for _, tc := range []struct {
		name string
		p    *idp
		kid  string
		sub  string
		want string // "": refused
	}{
		{"the company's alice", a, "ec-a", "alice", "alice"},
		{"the company's partner:alice", a, "ec-a", "partner:alice", ""},
		{"the company's partner:eu:alice", a, "ec-a", "partner:eu:alice", ""},
		{"the company's partner without the colon", a, "ec-a", "partner", "partner"},
		{"the partner's alice", b, "ec-b", "alice", "partner:alice"},
		{"the partner's eu:alice", b, "ec-b", "eu:alice", ""},
		{"the partner's eu-alice", b, "ec-b", "eu-alice", "partner:eu-alice"},
		{"the EU partner's alice", c, "ec-c", "alice", "partner:eu:alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := auth(tc.p, tc.kid, tc.sub)
			if tc.want == "" {
				require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "accepted: %v", pr)
				require.ErrorContains(t, err, "prefix of another issuer")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, pr.ID)
		})
	}
}
