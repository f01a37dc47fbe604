package identity_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// A provider that withdraws every key it can sign with (a compromised key
// pulled, a kill switch), or replaces them only with keys this broker
// cannot use, has answered: its old keys are refused from that fetch on,
// not kept for MaxKeyAge as when it cannot be reached.
func TestOIDCWithdrawnKeysStopVerifying(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish func(t *testing.T, p *idp)
	}{
		{"an empty key set", func(t *testing.T, p *idp) { p.setPublished() }},
		{"only a key too weak to use", func(t *testing.T, p *idp) {
			weak, err := rsa.GenerateKey(rand.Reader, 1024)
			require.NoError(t, err)
			p.mu.Lock()
			p.keys["weak"] = idpKey{alg: jose.RS256, priv: weak}
			p.mu.Unlock()
			p.setPublished("weak")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOIDCFixture(t, false)
			p := f.p
			_, err := f.auth(p.sign(t, "rsa-1", p.good("user-1")))
			require.NoError(t, err)

			tc.publish(t, p)
			f.clk.Advance(time.Minute) // past MinRefreshInterval
			p.addKey(t, "rsa-unknown", jose.RS256, false)
			_, unknownErr := f.auth(p.sign(t, "rsa-unknown", p.good("user-1"))) // an unknown kid: one fetch
			require.EqualValues(t, 2, p.fetches.Load())

			for _, kid := range []string{"rsa-1", "ec-1", "ed-1"} {
				_, err = f.auth(p.sign(t, kid, p.good("user-1")))
				require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%s still verifies: %v", kid, err)
			}
			// The provider answered: a verdict on the token, not "unavailable".
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(unknownErr), "%v", unknownErr)
			require.Contains(t, f.logs.String(), "publishes no usable signing key")

			// The provider publishes keys again: they verify at the next fetch.
			p.setPublished("rsa-1")
			f.clk.Advance(time.Minute)
			_, err = f.auth(p.sign(t, "rsa-1", p.good("user-1")))
			require.NoError(t, err)
			requireNoSecrets(t, f.logs.String())
		})
	}
}

// A document that is not a key set (no keys member: an error page served
// with status 200, say) is a failed fetch: the cached keys stay in use.
func TestOIDCDocumentWithoutKeysIsAFailedFetch(t *testing.T) {
	f := newOIDCFixture(t, false)
	p := f.p
	var broken atomic.Bool
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			_, _ = w.Write([]byte(`{"error":"maintenance"}`))
			return
		}
		p.srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer jwks.Close()
	m, err := identity.NewOIDC(&identity.OIDCOptions{Now: f.clk.Now, Logger: f.logs.Logger(), Issuers: []identity.Issuer{{URL: p.srv.URL,
		Audiences: []string{"pigeon"}, JWKSURL: jwks.URL + "/jwks", MinRefreshInterval: time.Minute}}})
	require.NoError(t, err)
	auth := func(tok string) error {
		_, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tok})
		return err
	}
	require.NoError(t, auth(p.sign(t, "rsa-1", p.good("user-1"))))
	broken.Store(true)
	f.clk.Advance(time.Minute)
	p.addKey(t, "rsa-unknown", jose.RS256, false)
	require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(auth(p.sign(t, "rsa-unknown", p.good("user-1")))))
	require.NoError(t, auth(p.sign(t, "rsa-1", p.good("user-1"))), "cached keys stay in use")
	require.Contains(t, f.logs.String(), "no keys array")
}
