package pigeon

import (
	"context"
	"crypto/sha256"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStaticTokensLookUpByDigest: a known token is found by its SHA-256,
// never by its text, and a guess that shares any part of it is refused.
func TestStaticTokensLookUpByDigest(t *testing.T) {
	const tok = "s3cret-token-of-orders"
	s := NewStaticTokens(StaticToken{Token: tok, Principal: "orders"})
	e, ok := s.byHash[sha256.Sum256([]byte(tok))]
	require.True(t, ok, "the token is kept under its digest")
	require.Equal(t, "orders", e.p.ID)
	for _, tc := range []struct{ name, guess string }{
		{"empty", ""},
		{"prefix", tok[:len(tok)-1]},
		{"longer", tok + "x"},
		{"last byte differs", tok[:len(tok)-1] + "X"},
		{"first byte differs", "S" + tok[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Authenticate(context.Background(), tc.guess)
			require.Equal(t, CodeUnauthenticated, ErrorCode(err))
		})
	}
	p, err := s.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, "orders", p.ID)
}
