package identity_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
)

// idp is a local identity provider: an OIDC discovery document and a JWKS
// whose keys the test rotates, and a switch that makes it unreachable.
type idp struct {
	srv     *httptest.Server
	mu      sync.Mutex
	keys    map[string]idpKey // every key it can sign with
	publish []string          // the kids its JWKS lists
	down    atomic.Bool
	fetches atomic.Int64
	now     func() time.Time // of the claims good makes
}

type idpKey struct {
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func newIDP(t testing.TB) *idp {
	t.Helper()
	p := &idp{keys: map[string]idpKey{}, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		if p.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.mu.Lock()
		var set jose.JSONWebKeySet
		for _, kid := range p.publish {
			k := p.keys[kid]
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: kid, Algorithm: string(k.alg), Use: "sig"})
		}
		p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(set)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// addKey makes a key; publish lists it in the JWKS.
func (p *idp) addKey(t testing.TB, kid string, alg jose.SignatureAlgorithm, publish bool) {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	}
	require.NoError(t, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = idpKey{alg: alg, priv: priv}
	if publish {
		p.publish = append(p.publish, kid)
	}
}

// setPublished replaces the kids the JWKS lists (rotation).
func (p *idp) setPublished(kids ...string) {
	p.mu.Lock()
	p.publish = kids
	p.mu.Unlock()
}

// claims are a token's claims; good returns valid ones for the test issuer.
func (p *idp) good(sub string) map[string]any {
	now := p.now()
	return map[string]any{"iss": p.srv.URL, "aud": "pigeon", "sub": sub, "iat": now.Unix(), "nbf": now.Unix(),
		"exp": now.Add(time.Hour).Unix(), "roles": []string{"reader"}, "team": "payments"}
}

// sign signs claims with key kid, typ JWT.
func (p *idp) sign(t testing.TB, kid string, claims map[string]any) string {
	t.Helper()
	return p.signTyped(t, kid, "JWT", claims)
}

// signTyped signs claims with key kid and the typ header typ (none when
// empty).
func (p *idp) signTyped(t testing.TB, kid, typ string, claims map[string]any) string {
	t.Helper()
	p.mu.Lock()
	k := p.keys[kid]
	p.mu.Unlock()
	opts := (&jose.SignerOptions{}).WithHeader("kid", kid)
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, opts)
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	jws, err := s.Sign(payload)
	require.NoError(t, err)
	tok, err := jws.CompactSerialize()
	require.NoError(t, err)
	return tok
}

func b64(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

// unsigned is an alg:none token.
func unsigned(kid string, claims map[string]any) string {
	return b64(map[string]string{"alg": "none", "kid": kid, "typ": "JWT"}) + "." + b64(claims) + "."
}

// hmacWithPublicKey is the classic confusion forgery: HS256 keyed with the
// issuer's public key (PEM), which a careless verifier would accept.
func (p *idp) hmacWithPublicKey(t testing.TB, kid string, claims map[string]any) string {
	t.Helper()
	p.mu.Lock()
	k := p.keys[kid]
	p.mu.Unlock()
	der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
	require.NoError(t, err)
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	in := b64(map[string]string{"alg": "HS256", "kid": kid, "typ": "JWT"}) + "." + b64(claims)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
