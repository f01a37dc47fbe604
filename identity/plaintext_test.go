package identity_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// The signing keys are what a bearer token's identity rests on: a key set
// read in plain text over the network lets whoever is on the path put in a
// key of its own and sign any principal. Keys are fetched over HTTPS only
// (plain HTTP only to a loopback address, a provider on the same host),
// whatever names the URL: the configuration, a discovery document or a
// redirect.
func TestOIDCKeysNeverOverPlainHTTP(t *testing.T) {
	// The identity provider, over TLS: its discovery document, its key set,
	// and a key set URL that redirects elsewhere.
	legit := newIDP(t)
	legit.addKey(t, "legit-1", jose.ES256, true)
	// On the path: a plain HTTP server the network routes keys.idp.test to,
	// serving a key set of the attacker's.
	evil := newIDP(t)
	evil.addKey(t, "legit-1", jose.ES256, true)
	const plain = "http://keys.idp.test/jwks"

	mux := http.NewServeMux()
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	var discoveryJWKS atomic.Value // of the discovery document
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": tlsSrv.URL, "jwks_uri": discoveryJWKS.Load().(string)})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(legit.srv.URL + "/jwks")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, plain, http.StatusFound) })
	mux.HandleFunc("/moved-tls", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/jwks", http.StatusFound) })

	tr := tlsSrv.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == "keys.idp.test:80" {
			addr = evil.srv.Listener.Addr().String()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	client := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)

	claims := func(p *idp) map[string]any {
		c := p.good("admin")
		c["iss"] = tlsSrv.URL
		return c
	}
	for _, tc := range []struct {
		name    string
		jwksURL string // "" : discovery
		signer  *idp
		accept  bool
	}{
		{"the key set over TLS", tlsSrv.URL + "/jwks", legit, true},
		{"discovery names a key set over TLS", "", legit, true},
		{"the key set redirects over TLS", tlsSrv.URL + "/moved-tls", legit, true},
		{"discovery names a key set in plain text", "", evil, false},
		{"the key set redirects to plain text", tlsSrv.URL + "/moved", evil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			discoveryJWKS.Store(plain)
			if tc.accept && tc.jwksURL == "" {
				discoveryJWKS.Store(tlsSrv.URL + "/jwks")
			}
			m, err := identity.NewOIDC(&identity.OIDCOptions{HTTPClient: client, Issuers: []identity.Issuer{{URL: tlsSrv.URL, Audiences: []string{"pigeon"}, JWKSURL: tc.jwksURL}}})
			require.NoError(t, err)
			p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: tc.signer.sign(t, "legit-1", claims(tc.signer))})
			if tc.accept {
				require.NoError(t, err)
				require.Equal(t, "admin", p.ID)
				return
			}
			require.Error(t, err)
			require.Nil(t, p, "a key read in plain text signed a principal")
			require.Equal(t, pigeon.CodeIdentityUnavailable, pigeon.ErrorCode(err), "%v", err)
		})
	}
}

// Only a key set the broker reads over HTTPS (or from its own host) is
// configured: a plain HTTP URL to another host is refused at start.
func TestOIDCConfigPlainHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   identity.Issuer
		ok   bool
	}{
		{"https issuer, discovery", identity.Issuer{URL: "https://idp.example.com"}, true},
		{"https key set", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "https://idp.example.com/jwks"}, true},
		{"http issuer named only, https key set", identity.Issuer{URL: "http://idp.example.com", JWKSURL: "https://idp.example.com/jwks"}, true},
		{"http issuer, discovery", identity.Issuer{URL: "http://idp.example.com"}, false},
		{"http key set", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "http://idp.example.com/jwks"}, false},
		{"http key set on 127.0.0.1", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "http://127.0.0.1:8080/jwks"}, true},
		{"http issuer on localhost, discovery", identity.Issuer{URL: "http://localhost:8080/realms/x"}, true},
		{"http key set on ::1", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "http://[::1]:8080/jwks"}, true},
		{"http key set on a name that starts like localhost", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "http://localhost.evil.example/jwks"}, false},
		{"http key set on 10.0.0.1", identity.Issuer{URL: "https://idp.example.com", JWKSURL: "http://10.0.0.1/jwks"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Audiences = []string{"pigeon"}
			_, err := identity.CheckIssuer(tc.in)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "https")
		})
	}
}
