package pigeon_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAuthFailedNamesTheLockedSite: a refusal because the source's IPv6
// site (its /48) reached its limit, though the /64 itself never failed,
// is audited naming that site, so that an auditor can tell it from a
// lockout of the /64 alone; a source locked out by its own count names no
// site. Before, both records read "auth:token from <the /64>".
func TestAuthFailedNamesTheLockedSite(t *testing.T) {
	const limit = 2
	f := newFixture(t, func(o *pigeon.Options) { o.AuthFailureLimit, o.AuthFailureWindow = limit, time.Minute })
	try := func(tok, remote string) error {
		_, err := f.e.AuthenticateCredential(ctx, pigeon.Credential{Bearer: tok, RemoteAddr: remote})
		return err
	}
	for i := range 16 * limit {
		requireCode(t, try("guess", fmt.Sprintf("[2001:db8:7:%x::1]:4000", i)), pigeon.CodeUnauthenticated)
	}
	requireCode(t, try("orders-token", "[2001:db8:7:ffff::9]:4000"), pigeon.CodeRateLimited)
	for range limit {
		requireCode(t, try("guess", "192.0.2.7:1"), pigeon.CodeUnauthenticated)
	}
	requireCode(t, try("orders-token", "192.0.2.7:1"), pigeon.CodeRateLimited)

	recs, _ := authFailures(t, f.e)
	var refs []string
	for _, r := range recs {
		if r.Code == string(pigeon.CodeRateLimited) {
			refs = append(refs, r.Ref)
		}
	}
	require.Len(t, refs, 2, "%q", refs)
	require.True(t, strings.HasSuffix(refs[0], "from 2001:db8:7:ffff::/64 (site 2001:db8:7::/48 locked out)"), refs[0])
	require.True(t, strings.HasSuffix(refs[1], "from 192.0.2.7"), refs[1])
}
