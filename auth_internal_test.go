package pigeon

import (
	"context"
	"crypto/sha256"
	"net/netip"
	"testing"
	"time"

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

// TestAuthGuardIsBounded: the guard remembers at most maxAuthSources
// addresses, forgetting the one whose window began first; a locked-out
// source that is still recent stays locked.
func TestAuthGuardIsBounded(t *testing.T) {
	g := newAuthGuard(2, time.Minute)
	at := time.Unix(1000, 0)
	locked := netip.MustParseAddr("2001:db8::ffff")
	g.failed(netip.MustParseAddr("192.0.2.1"), at)
	for i := range maxAuthSources + 100 {
		ip := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)})
		g.failed(ip, at.Add(time.Millisecond))
		require.LessOrEqual(t, g.size(), maxAuthSources)
	}
	g.failed(locked, at.Add(time.Second))
	g.failed(locked, at.Add(time.Second))
	require.Equal(t, maxAuthSources, g.size())
	_, ok := g.sources[netip.MustParseAddr("192.0.2.1")]
	require.False(t, ok, "the oldest window was forgotten")
	left, ok := g.locked(locked, at.Add(2*time.Second))
	require.True(t, ok)
	require.Equal(t, 59*time.Second, left)
}
