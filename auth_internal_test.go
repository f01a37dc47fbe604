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
// sources, forgetting the one whose window began first; a locked-out
// source that is still recent stays locked.
func TestAuthGuardIsBounded(t *testing.T) {
	g := newAuthGuard(2, time.Minute)
	at := time.Unix(1000, 0)
	locked := SourceOf("2001:db8:ffff::1")
	first := SourceOf("192.0.2.1")
	g.failed(first, at)
	for i := range maxAuthSources + 100 {
		// A /64 of its own each: 2001:db8:0:i::1.
		ip := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 4: byte(i >> 24), 5: byte(i >> 16), 6: byte(i >> 8), 7: byte(i), 15: 1})
		g.failed(SourceOfAddr(ip), at.Add(time.Millisecond))
		require.LessOrEqual(t, g.size(), maxAuthSources)
	}
	g.failed(locked, at.Add(time.Second))
	g.failed(locked, at.Add(time.Second))
	require.Equal(t, maxAuthSources, g.size())
	_, ok := g.sources[first]
	require.False(t, ok, "the oldest window was forgotten")
	left, ok := g.locked(locked, at.Add(2*time.Second))
	require.True(t, ok)
	require.Equal(t, 59*time.Second, left)
}

// TestAuthGuardKeysIPv6By64: failures from addresses of one IPv6 /64
// count as one source's, whatever their interface ID or zone, so rotating
// through a /64 does not dodge the lockout, and take one place in the
// table; the next /64, and IPv4 addresses, count on their own.
func TestAuthGuardKeysIPv6By64(t *testing.T) {
	g := newAuthGuard(3, time.Minute)
	at := time.Unix(1000, 0)
	for _, remote := range []string{"[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:4001", "2001:db8:1:2:abcd::9"} {
		_, locked := g.locked(SourceOf(remote), at)
		require.False(t, locked, remote)
		g.failed(SourceOf(remote), at)
	}
	require.Equal(t, 1, g.size(), "one /64 is one source")
	for _, remote := range []string{"[2001:db8:1:2::77]:1", "[fe80::1%eth0]:1"} {
		_, locked := g.locked(SourceOf(remote), at)
		require.Equal(t, remote != "[fe80::1%eth0]:1", locked, remote)
	}
	_, locked := g.locked(SourceOf("[2001:db8:1:3::1]:1"), at)
	require.False(t, locked, "the next /64 is another source")
	for _, remote := range []string{"192.0.2.1:1", "192.0.2.2:1", "[::ffff:192.0.2.3]:1"} {
		g.failed(SourceOf(remote), at)
	}
	_, locked = g.locked(SourceOf("192.0.2.4:1"), at)
	require.False(t, locked, "IPv4 sources are single addresses")
	require.Equal(t, 4, g.size())
}

// TestAuthGuardLockedIsLockFreeWhenNoneIsLocked: while no source is
// locked out, locked answers without the guard's mutex (a flood of
// accepts never queues behind refusals being counted); once one is, it
// looks the source up, and again answers without the mutex once every
// lockout has ended.
func TestAuthGuardLockedIsLockFreeWhenNoneIsLocked(t *testing.T) {
	g := newAuthGuard(2, time.Minute)
	at := time.Unix(1000, 0)
	src := SourceOf("192.0.2.1")
	g.failed(src, at)
	// answers calls locked with g.mu held elsewhere and reports whether
	// it answered without waiting for it.
	answers := func(now time.Time) bool {
		g.mu.Lock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = g.locked(src, now)
		}()
		select {
		case <-done:
			g.mu.Unlock()
			return true
		case <-time.After(100 * time.Millisecond):
			g.mu.Unlock()
			<-done
			return false
		}
	}
	require.True(t, answers(at), "one failure locks nothing")
	g.failed(src, at)
	_, locked := g.locked(src, at)
	require.True(t, locked)
	require.False(t, answers(at.Add(30*time.Second)), "a lockout in force: the source is looked up")
	require.True(t, answers(at.Add(time.Minute)), "every lockout ended")
	_, locked = g.locked(src, at.Add(time.Minute))
	require.False(t, locked)
}
