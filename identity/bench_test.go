package identity_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkOIDCAuthenticate is the cost a JWT bearer adds to a negotiate
// or a connection: parse, signature check against the cached JWKS key,
// claim checks and the principal's roles and attributes, for each allowed
// algorithm. The keys are fetched once, before the timer.
//
//	go test -run '^$' -bench OIDCAuthenticate -benchmem ./identity
func BenchmarkOIDCAuthenticate(b *testing.B) {
	f := newOIDCFixture(b, false)
	for _, kid := range []string{"rsa-1", "ec-1", "ed-1"} {
		tok := f.p.sign(b, kid, f.p.good("user-1"))
		_, err := f.auth(tok)
		require.NoError(b, err)
		b.Run(kid, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.auth(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
