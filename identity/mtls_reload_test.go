package identity_test

import (
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// TestMTLSReload: Reload swaps a trust domain's authorities, forgetting
// the chains verified before (a certificate of the CA taken out is refused
// though it verified, and was cached, a moment ago); a reload that names
// other trust domains, or an authority that is no CA, is refused and
// changes nothing.
func TestMTLSReload(t *testing.T) {
	caA, caB, caC := newCA(t, "a"), newCA(t, "b"), newCA(t, "c")
	m, err := identity.NewMTLS(&identity.MTLSOptions{TrustDomains: []identity.TrustDomain{
		{Name: "a.org", Authorities: []*x509.Certificate{caA.cert}}, {Name: "b.org", Authorities: []*x509.Certificate{caB.cert}}}})
	require.NoError(t, err)
	leafA, _ := caA.issue(t, leafOpts{spiffeID: "spiffe://a.org/x"})
	leafC, _ := caC.issue(t, leafOpts{spiffeID: "spiffe://a.org/x"})
	leafB, _ := caB.issue(t, leafOpts{spiffeID: "spiffe://b.org/y"})
	verifies := func(leaf *x509.Certificate) bool {
		_, err := m.Verify([]*x509.Certificate{leaf})
		if err != nil {
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err))
		}
		return err == nil
	}
	require.True(t, verifies(leafA))
	require.False(t, verifies(leafC))

	workload, _ := caC.issue(t, leafOpts{spiffeID: "spiffe://a.org/w"})
	for name, domains := range map[string][]identity.TrustDomain{
		"another domain":  {{Name: "a.org", Authorities: []*x509.Certificate{caC.cert}}, {Name: "c.org", Authorities: []*x509.Certificate{caB.cert}}},
		"one domain less": {{Name: "a.org", Authorities: []*x509.Certificate{caC.cert}}},
		"not a CA":        {{Name: "a.org", Authorities: []*x509.Certificate{workload}}, {Name: "b.org", Authorities: []*x509.Certificate{caB.cert}}},
		"no authority":    {{Name: "a.org"}, {Name: "b.org", Authorities: []*x509.Certificate{caB.cert}}},
		"listed twice":    {{Name: "a.org", Authorities: []*x509.Certificate{caC.cert}}, {Name: "a.org", Authorities: []*x509.Certificate{caB.cert}}},
	} {
		require.Error(t, m.Reload(domains), name)
		require.True(t, verifies(leafA), "%s: nothing changed", name)
		require.False(t, verifies(leafC), name)
	}

	require.NoError(t, m.Reload([]identity.TrustDomain{
		{Name: "b.org", Authorities: []*x509.Certificate{caB.cert}}, {Name: "a.org", Authorities: []*x509.Certificate{caC.cert}}}))
	require.False(t, verifies(leafA), "verified before, its CA taken out")
	require.True(t, verifies(leafC))
	require.True(t, verifies(leafB))
	require.True(t, m.Authorities().Equal(pool(caB.cert, caC.cert)))
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}
