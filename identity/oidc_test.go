package identity_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
	"pigeon/internal/testlog"
)

// clock is a settable clock.
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// oidcFixture is an OIDC method on a local identity provider.
type oidcFixture struct {
	p     *idp
	m     *identity.OIDC
	clk   *clock
	logs  *testlog.Buffer
	chain *identity.Chain
}

func newOIDCFixture(t testing.TB, discovery bool) *oidcFixture {
	t.Helper()
	f := &oidcFixture{p: newIDP(t), clk: &clock{}, logs: &testlog.Buffer{}}
	f.p.now = f.clk.Now
	f.p.addKey(t, "rsa-1", jose.RS256, true)
	f.p.addKey(t, "ec-1", jose.ES256, true)
	f.p.addKey(t, "ed-1", jose.EdDSA, true)
	in := identity.Issuer{URL: f.p.srv.URL, Audiences: []string{"pigeon"}, RolesClaim: "roles",
		AttributeClaims: map[string]string{"team": "team"}, MinRefreshInterval: time.Minute, MaxKeyAge: 2 * time.Hour, RefreshInterval: time.Hour}
	if !discovery {
		in.JWKSURL = f.p.srv.URL + "/jwks"
	}
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{in}, Logger: f.logs.Logger(), Now: f.clk.Now})
	require.NoError(t, err)
	f.m = m
	f.chain = identity.NewChain(&identity.ChainOptions{Logger: f.logs.Logger()},
		identity.Method{Name: pigeon.AuthOIDC, Auth: m},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(pigeon.StaticToken{Token: "static-1", Principal: "svc-static"}))})
	return f
}

func (f *oidcFixture) auth(tok string) (*pigeon.Principal, error) {
	return f.chain.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok, RemoteAddr: "192.0.2.1:1234"})
}

func TestOIDCTokens(t *testing.T) {
	for _, discovery := range []bool{false, true} {
		f := newOIDCFixture(t, discovery)
		p := f.p
		with := func(mod func(map[string]any)) map[string]any {
			c := p.good("user-1")
			mod(c)
			return c
		}
		cases := []struct {
			name string
			tok  string
			code pigeon.Code // "" : accepted
		}{
			{"RS256", p.sign(t, "rsa-1", p.good("user-1")), ""},
			{"ES256", p.sign(t, "ec-1", p.good("user-1")), ""},
			{"EdDSA", p.sign(t, "ed-1", p.good("user-1")), ""},
			{"expired", p.sign(t, "rsa-1", with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), pigeon.CodeUnauthenticated},
			{"expired within leeway", p.sign(t, "rsa-1", with(func(c map[string]any) { c["exp"] = time.Now().Add(-10 * time.Second).Unix() })), ""},
			{"no exp", p.sign(t, "rsa-1", with(func(c map[string]any) { delete(c, "exp") })), pigeon.CodeUnauthenticated},
			{"not yet valid", p.sign(t, "rsa-1", with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), pigeon.CodeUnauthenticated},
			{"issued in the future", p.sign(t, "rsa-1", with(func(c map[string]any) { c["iat"] = time.Now().Add(time.Hour).Unix() })), pigeon.CodeUnauthenticated},
			{"wrong audience", p.sign(t, "rsa-1", with(func(c map[string]any) { c["aud"] = "someone-else" })), pigeon.CodeUnauthenticated},
			{"wrong issuer", p.sign(t, "rsa-1", with(func(c map[string]any) { c["iss"] = "https://evil.example" })), pigeon.CodeUnauthenticated},
			{"no principal claim", p.sign(t, "rsa-1", with(func(c map[string]any) { delete(c, "sub") })), pigeon.CodeUnauthenticated},
			{"alg none", unsigned("rsa-1", p.good("user-1")), pigeon.CodeUnauthenticated},
			{"HS256 with the public key", p.hmacWithPublicKey(t, "rsa-1", p.good("user-1")), pigeon.CodeUnauthenticated},
			// Access and ID tokens only: a logout token or another security
			// event token of the issuer (same keys, sub and aud) is no
			// credential, nor is a token typed for another use.
			{"no typ", p.signTyped(t, "rsa-1", "", p.good("user-1")), ""},
			{"typ at+jwt", p.signTyped(t, "rsa-1", "at+jwt", p.good("user-1")), ""},
			{"typ application/at+JWT", p.signTyped(t, "rsa-1", "application/at+JWT", p.good("user-1")), ""},
			{"typ logout+jwt", p.signTyped(t, "rsa-1", "logout+jwt", p.good("user-1")), pigeon.CodeUnauthenticated},
			{"typ secevent+jwt", p.signTyped(t, "rsa-1", "secevent+jwt", p.good("user-1")), pigeon.CodeUnauthenticated},
			{"typ dpop+jwt", p.signTyped(t, "ec-1", "dpop+jwt", p.good("user-1")), pigeon.CodeUnauthenticated},
			{"an events claim (a logout token typed JWT)", p.sign(t, "rsa-1", with(func(c map[string]any) {
				c["events"] = map[string]any{"http://schemas.openid.net/event/backchannel-logout": map[string]any{}}
			})), pigeon.CodeUnauthenticated},
			{"tampered payload", func() string {
				tok := p.sign(t, "rsa-1", p.good("user-1"))
				parts := strings.Split(tok, ".")
				return parts[0] + "." + b64(p.good("admin")) + "." + parts[2]
			}(), pigeon.CodeUnauthenticated},
		}
		for _, tc := range cases {
			pr, err := f.auth(tc.tok)
			if tc.code == "" {
				require.NoError(t, err, "%s (discovery %v)", tc.name, discovery)
				require.Equal(t, "user-1", pr.ID)
				require.Equal(t, pigeon.AuthOIDC, pr.Method)
				require.Equal(t, []string{"reader"}, pr.Roles)
				require.Equal(t, map[string]string{"team": "payments"}, pr.Attributes)
				continue
			}
			require.Error(t, err, tc.name)
			require.Equal(t, tc.code, pigeon.ErrorCode(err), "%s: %v", tc.name, err)
			require.Nil(t, pr)
			require.NotContains(t, err.Error(), tc.tok)
		}
		requireNoSecrets(t, f.logs.String())
	}
}

// A token the OIDC method recognizes and refuses is not passed on, even
// when a later method would accept the same string.
func TestOIDCRefusalIsNotPassedOn(t *testing.T) {
	f := newOIDCFixture(t, false)
	expired := f.p.good("user-1")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	tok := f.p.sign(t, "rsa-1", expired)
	chain := identity.NewChain(nil,
		identity.Method{Name: pigeon.AuthOIDC, Auth: f.m},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(pigeon.StaticToken{Token: tok, Principal: "impostor"}))})
	_, err := chain.Authenticate(context.Background(), tok)
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	// A token of an issuer nobody configured goes on to the static tokens.
	other := f.p.good("user-1")
	other["iss"] = "https://elsewhere.example"
	tok2 := f.p.sign(t, "rsa-1", other)
	chain = identity.NewChain(nil,
		identity.Method{Name: pigeon.AuthOIDC, Auth: f.m},
		identity.Method{Name: pigeon.AuthToken, Auth: identity.Lookup(pigeon.NewStaticTokens(pigeon.StaticToken{Token: tok2, Principal: "static"}))})
	pr, err := chain.Authenticate(context.Background(), tok2)
	require.NoError(t, err)
	require.Equal(t, "static", pr.ID)
	require.Equal(t, pigeon.AuthToken, pr.Method)
}

func TestOIDCKeyRotation(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	_, err := f.auth(p.sign(t, "rsa-1", p.good("user-1")))
	require.NoError(t, err)
	require.EqualValues(t, 1, p.fetches.Load())

	// A kid the provider has not published yet: refused, one refresh.
	f.clk.Advance(time.Minute)
	p.addKey(t, "rsa-2", jose.RS256, false)
	_, err = f.auth(p.sign(t, "rsa-2", p.good("user-1")))
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	require.Contains(t, err.Error(), "kid")
	require.EqualValues(t, 2, p.fetches.Load())

	// The provider rotates: rsa-2 in, rsa-1 out. Within the refresh rate
	// limit the new kid is still refused and nothing is fetched.
	p.setPublished("rsa-2", "ec-1", "ed-1")
	_, err = f.auth(p.sign(t, "rsa-2", p.good("user-1")))
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
	require.EqualValues(t, 2, p.fetches.Load(), "unknown kids refresh at most once per MinRefreshInterval")

	// After the interval the unknown kid triggers a refresh and verifies.
	f.clk.Advance(time.Minute)
	pr, err := f.auth(p.sign(t, "rsa-2", p.good("user-2")))
	require.NoError(t, err)
	require.Equal(t, "user-2", pr.ID)
	require.EqualValues(t, 3, p.fetches.Load())
	require.Contains(t, f.logs.String(), "issuer keys rotated")

	// The kid the JWKS removed is refused.
	_, err = f.auth(p.sign(t, "rsa-1", p.good("user-1")))
	require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
}

func TestOIDCProviderUnreachable(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return p.fetches.Load() >= 1 }, 30*time.Second, 10*time.Millisecond)

	p.down.Store(true)
	f.clk.Advance(time.Hour + time.Second) // the periodic refresh fails
	require.Eventually(t, func() bool { return strings.Contains(f.logs.String(), "cannot fetch the issuer's signing keys") }, 30*time.Second, 10*time.Millisecond)

	// Cached keys keep verifying.
	pr, err := f.auth(p.sign(t, "ec-1", p.good("user-1")))
	require.NoError(t, err)
	require.Equal(t, "user-1", pr.ID)

	// A new kid cannot be fetched: refused with a code that says so.
	p.addKey(t, "rsa-new", jose.RS256, true)
	f.clk.Advance(time.Minute)
	_, err = f.auth(p.sign(t, "rsa-new", p.good("user-1")))
	require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(err), "%v", err)
	require.Contains(t, f.logs.String(), "status 503")

	// Past MaxKeyAge since the last good fetch, cached keys expire too.
	f.clk.Advance(2 * time.Hour)
	_, err = f.auth(p.sign(t, "ec-1", p.good("user-1")))
	require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(err), "%v", err)

	// The provider comes back: keys refresh and tokens verify again.
	p.down.Store(false)
	f.clk.Advance(time.Minute)
	_, err = f.auth(p.sign(t, "rsa-new", p.good("user-1")))
	require.NoError(t, err)
	requireNoSecrets(t, f.logs.String())
}

func TestOIDCConfigRefused(t *testing.T) {
	for _, in := range []identity.Issuer{
		{URL: "not a url", Audiences: []string{"a"}},
		{URL: "https://idp.example"},
		{URL: "https://idp.example", Audiences: []string{"a"}, Algorithms: []string{"HS256"}},
		{URL: "https://idp.example", Audiences: []string{"a"}, Algorithms: []string{"none"}},
		{URL: "https://idp.example", Audiences: []string{"a"}, Leeway: time.Hour},
		{URL: "https://idp.example", Audiences: []string{"a"}, TrustDomains: []string{"spiffe://merchant-prod"}},
		{URL: "https://idp.example", Audiences: []string{"a"}, TrustDomains: []string{"Merchant-Prod"}},
	} {
		_, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{in}})
		require.Error(t, err, "%+v", in)
	}
}

// requireNoSecrets fails when a log holds token or key material.
func requireNoSecrets(t *testing.T, logs string) {
	t.Helper()
	for _, s := range []string{"eyJ", "BEGIN ", "PRIVATE KEY", "static-1"} {
		require.NotContains(t, logs, s)
	}
}

// A key set URL may carry a credential of its own (basic auth in the
// userinfo, an API key in the query). It is the operator's secret: the
// errors and log lines of a failed fetch, and the refusal of a bad URL at
// start, name the URL without them.
func TestOIDCKeySetURLSecretsNotLogged(t *testing.T) {
	p := newIDP(t)
	p.addKey(t, "ec-1", jose.ES256, true)
	p.down.Store(true)
	logs := &testlog.Buffer{}
	u := strings.Replace(p.srv.URL, "http://", "http://reader:s3cret-pass@", 1) + "/jwks?api_key=s3cret-key"
	m, err := identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: u}},
		Logger: logs.Logger()})
	require.NoError(t, err)
	chain := identity.NewChain(&identity.ChainOptions{Logger: logs.Logger()}, identity.Method{Name: pigeon.AuthOIDC, Auth: m})
	_, err = chain.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "ec-1", p.good("user-1")), RemoteAddr: "192.0.2.1:1234"})
	require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(err), "%v", err)
	require.Contains(t, logs.String(), "status 503")
	require.Contains(t, logs.String(), "/jwks")
	require.NotContains(t, logs.String(), "s3cret")

	// A provider that cannot be reached at all: the client's own error.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	logs = &testlog.Buffer{}
	m, err = identity.NewOIDC(&identity.OIDCOptions{Issuers: []identity.Issuer{{URL: p.srv.URL, Audiences: []string{"pigeon"},
		JWKSURL: strings.Replace(gone.URL, "http://", "http://reader:s3cret-pass@", 1) + "/jwks?api_key=s3cret-key"}}, Logger: logs.Logger()})
	require.NoError(t, err)
	_, err = m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: p.sign(t, "ec-1", p.good("user-1"))})
	require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(err), "%v", err)
	require.Contains(t, logs.String(), "/jwks")
	require.NotContains(t, logs.String(), "s3cret")

	_, err = identity.CheckIssuer(identity.Issuer{URL: "https://idp.example", Audiences: []string{"a"}, JWKSURL: "http://reader:s3cret-pass@idp.example/jwks?api_key=s3cret-key"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}
