package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"pigeon"
)

// TrustDomain is a SPIFFE trust domain whose X.509 SVIDs are accepted, and
// the certificate authorities (its bundle) that issue them.
type TrustDomain struct {
	// Name is the trust domain ("example.org", no scheme).
	Name string
	// Authorities are the root certificates of its bundle: certificate
	// authorities (basic constraints CA:TRUE; key usage, when present,
	// with keyCertSign).
	Authorities []*x509.Certificate
}

// MTLSOptions configure MTLS.
type MTLSOptions struct {
	// TrustDomains are the trust domains allowed; a certificate whose SPIFFE
	// ID names any other is refused. At least one.
	TrustDomains []TrustDomain
	// Required refuses a credential without a client certificate;
	// otherwise such a credential is left to the next method of the chain.
	Required bool
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// MTLS authenticates the client certificate of a TLS connection: an X.509
// SVID whose URI SAN is the SPIFFE ID spiffe://trust-domain/path, verified
// by go-spiffe against the bundle of its own trust domain. The principal is
// the SPIFFE ID; its roles and attributes come from the account of that
// name (the engine merges them), so removing a role from the account
// revokes at the next check. The principal's Expires is the earliest
// NotAfter of the verified chain, so its contracts end when the
// certificate does. It is safe for concurrent use.
type MTLS struct {
	opts  MTLSOptions
	trust atomic.Pointer[trust]
	mu    sync.Mutex // guards the cache of the trust in use
}

// trust is what MTLS verifies against: the trust domains' bundles, and
// the chains verified against them (the cache, guarded by MTLS.mu). A
// reload replaces the whole, so that no chain verified against the old
// authorities outlives them.
type trust struct {
	bundles *x509bundle.Set
	pool    *x509.CertPool // every authority, for the TLS layer's CA hint
	cache   map[[32]byte]verified
}

// verified is a chain that verified, and how long that holds.
type verified struct {
	id                  spiffeid.ID
	notBefore, notAfter time.Time
}

const maxVerifiedCache = 4096

var _ pigeon.CredentialAuthenticator = (*MTLS)(nil)

// NewMTLS checks opts and returns the method.
func NewMTLS(opts *MTLSOptions) (*MTLS, error) {
	if opts == nil || len(opts.TrustDomains) == 0 {
		return nil, errors.New("identity: mTLS needs at least one trust domain")
	}
	o := *opts
	o.TrustDomains = slices.Clone(o.TrustDomains)
	if o.Now == nil {
		o.Now = time.Now
	}
	t, err := newTrust(o.TrustDomains)
	if err != nil {
		return nil, err
	}
	m := &MTLS{opts: o}
	m.trust.Store(t)
	return m, nil
}

// Reload replaces the trust domains' authorities with those of domains,
// which must name the same trust domains as before (the set of domains a
// principal may come from is configuration, not a bundle); it is checked
// as NewMTLS checks, and on error nothing changes. Chains verified before
// are forgotten: a client certificate of an authority no longer listed
// is refused at its next check (each HTTP request, each WebSocket
// upgrade, each handshake), whatever it was before. It is safe to call
// while connections are verified.
func (m *MTLS) Reload(domains []TrustDomain) error {
	if len(domains) != len(m.opts.TrustDomains) {
		return fmt.Errorf("identity: a reload names %d trust domains, not the %d configured", len(domains), len(m.opts.TrustDomains))
	}
	for _, d := range domains {
		if !slices.ContainsFunc(m.opts.TrustDomains, func(c TrustDomain) bool { return c.Name == d.Name }) {
			return fmt.Errorf("identity: a reload names trust domain %q, which is not configured", d.Name)
		}
	}
	t, err := newTrust(domains)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.trust.Store(t)
	m.mu.Unlock()
	return nil
}

// newTrust checks domains and builds their bundles.
func newTrust(domains []TrustDomain) (*trust, error) {
	t := &trust{bundles: x509bundle.NewSet(), pool: x509.NewCertPool(), cache: map[[32]byte]verified{}}
	for _, d := range domains {
		td, err := spiffeid.TrustDomainFromString(d.Name)
		if err == nil && td.Name() != d.Name {
			err = errors.New("a trust domain is a bare name (example.org), not a URI")
		}
		if err != nil {
			return nil, fmt.Errorf("identity: trust domain %q: %w", d.Name, err)
		}
		if len(d.Authorities) == 0 {
			return nil, fmt.Errorf("identity: trust domain %q has no certificate authority", d.Name)
		}
		if err := checkAuthorities(d.Authorities); err != nil {
			return nil, fmt.Errorf("identity: trust domain %q: %w", d.Name, err)
		}
		if t.bundles.Has(td) {
			return nil, fmt.Errorf("identity: trust domain %q is listed twice", d.Name)
		}
		t.bundles.Add(x509bundle.FromX509Authorities(td, slices.Clone(d.Authorities)))
		for _, c := range d.Authorities {
			t.pool.AddCert(c)
		}
	}
	return t, nil
}

// checkAuthorities refuses an authority that may not sign certificates:
// crypto/x509 trusts a root whatever its basic constraints say, so a
// workload's own certificate in a bundle (a chain file given as the CA,
// say) would let that workload's key sign a certificate for any SPIFFE ID
// of the trust domain. A signing certificate of an X.509-SVID bundle is a
// CA (basic constraints CA:TRUE) whose key usage, when it has one,
// includes certificate signing.
func checkAuthorities(cas []*x509.Certificate) error {
	for i, c := range cas {
		if c == nil || !c.BasicConstraintsValid || !c.IsCA || (c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0) {
			return fmt.Errorf("authority %d is not a certificate authority (basic constraints CA:TRUE, key usage keyCertSign)", i+1)
		}
	}
	return nil
}

// Required reports whether a client certificate is required.
func (m *MTLS) Required() bool { return m.opts.Required }

// Authorities returns a pool of every trust domain's authorities.
func (m *MTLS) Authorities() *x509.CertPool { return m.trust.Load().pool.Clone() }

// hint is the pool of Authorities as it is now, shared: the TLS layer
// only reads it.
func (m *MTLS) hint() *x509.CertPool { return m.trust.Load().pool }

// AuthenticateCredential implements pigeon.CredentialAuthenticator. Without
// a certificate it returns pigeon.ErrUnrecognized, or UNAUTHENTICATED when
// one is required.
func (m *MTLS) AuthenticateCredential(_ context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	if len(c.PeerCertificates) == 0 {
		if m.opts.Required {
			return nil, pigeon.NewError(pigeon.CodeUnauthenticated, "a client certificate is required")
		}
		return nil, pigeon.ErrUnrecognized
	}
	v, err := m.verify(c.PeerCertificates)
	if err != nil {
		return nil, err
	}
	return &pigeon.Principal{ID: v.id.String(), Method: pigeon.AuthMTLS, Expires: v.notAfter}, nil
}

// Verify checks a peer's chain (leaf first) and returns its SPIFFE ID. The
// refusal is an UNAUTHENTICATED *pigeon.Error whose cause says why (never
// certificate bytes).
func (m *MTLS) Verify(chain []*x509.Certificate) (spiffeid.ID, error) {
	v, err := m.verify(chain)
	return v.id, err
}

// verify is Verify, and how long the chain stays valid: until the earliest
// NotAfter of the chain it verified through (the leaf's, unless a CA
// certificate of the chain expires first).
func (m *MTLS) verify(chain []*x509.Certificate) (verified, error) {
	now := m.opts.Now()
	key := chainKey(chain)
	t := m.trust.Load()
	m.mu.Lock()
	v, ok := t.cache[key]
	m.mu.Unlock()
	if ok && !now.Before(v.notBefore) && now.Before(v.notAfter) {
		return v, nil
	}
	id, chains, err := x509svid.Verify(chain, t.bundles, x509svid.WithTime(now))
	if err == nil && id.Path() == "" {
		// X.509-SVID 5.2: a leaf's ID has a path. The trust domain's own
		// ID names its signing authorities, never a caller.
		err = errors.New("the SPIFFE ID has no path: it names a trust domain, not a workload")
	}
	if err == nil {
		chains, err = clientAuthChains(chains)
	}
	if err == nil {
		chains, err = strongChains(chains)
	}
	if err != nil {
		return verified{}, pigeon.WrapError(pigeon.CodeUnauthenticated, err,
			"the client certificate is not a valid SPIFFE certificate of an allowed trust domain")
	}
	v = verified{id: id, notBefore: chain[0].NotBefore, notAfter: chain[0].NotAfter}
	for _, ch := range chains {
		for _, c := range ch {
			v.notBefore = later(v.notBefore, c.NotBefore)
			if c.NotAfter.Before(v.notAfter) {
				v.notAfter = c.NotAfter
			}
		}
	}
	m.mu.Lock()
	// Kept with the trust it was verified against: a reload meanwhile
	// (under mu too) has put another in use, whose cache this never enters.
	if len(t.cache) >= maxVerifiedCache {
		clear(t.cache)
	}
	t.cache[key] = v
	m.mu.Unlock()
	return v, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// clientAuthChains returns the verified chains that may authenticate a
// client. x509svid.Verify checks no extended key usage (it verifies for
// any), so this is crypto/x509's rule for a purpose: every certificate of
// the chain, root included, lists no extended key usage (known or
// unknown: it is then unrestricted), or lists client authentication or
// any. A leaf for an unknown purpose only, or one under an intermediate
// for server authentication only, is no client certificate. The leaf's key
// usage, when it has one, must include digital signature (an X.509-SVID's
// must), which the TLS handshake's signature needs.
func clientAuthChains(chains [][]*x509.Certificate) ([][]*x509.Certificate, error) {
	if len(chains) > 0 && len(chains[0]) > 0 {
		if ku := chains[0][0].KeyUsage; ku != 0 && ku&x509.KeyUsageDigitalSignature == 0 {
			return nil, errors.New("the certificate's key usage does not include digital signature")
		}
	}
	var out [][]*x509.Certificate
	for _, ch := range chains {
		if slices.IndexFunc(ch, func(c *x509.Certificate) bool { return !allowsClientAuth(c) }) < 0 {
			out = append(out, ch)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the certificate, or a certificate authority of its chain, is not for client authentication (extended key usage)")
	}
	return out, nil
}

// strongChains returns the chains whose every certificate has a key of
// at least MinRSABits (RSA) or 256 bits (an elliptic curve; Ed25519): a
// leaf, or an authority, whose key can be factored or its discrete log
// found is no proof of who holds it.
func strongChains(chains [][]*x509.Certificate) ([][]*x509.Certificate, error) {
	var out [][]*x509.Certificate
	for _, ch := range chains {
		if !slices.ContainsFunc(ch, func(c *x509.Certificate) bool { return !strongKey(c.PublicKey) }) {
			out = append(out, ch)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the certificate, or a certificate authority of its chain, has a weak key (RSA under %d bits, or a curve under 256)", MinRSABits)
	}
	return out, nil
}

// MinRSABits is the smallest RSA key a client certificate, and every
// certificate of its chain, may have.
const MinRSABits = 2048

// strongKey reports whether pub is an RSA key of at least MinRSABits, an
// ECDSA key on a curve of at least 256 bits, or an Ed25519 key.
func strongKey(pub any) bool {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return k.N.BitLen() >= MinRSABits
	case *ecdsa.PublicKey:
		return k.Curve.Params().BitSize >= 256
	case ed25519.PublicKey:
		return true
	}
	return false
}

// allowsClientAuth reports whether c's extended key usage admits client
// authentication.
func allowsClientAuth(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 && len(c.UnknownExtKeyUsage) == 0 {
		return true
	}
	return slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageAny)
}

// chainKey identifies a chain by the hash of its certificates.
func chainKey(chain []*x509.Certificate) [32]byte {
	h := sha256.New()
	for _, c := range chain {
		h.Write(c.Raw)
		h.Write([]byte{0})
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}
