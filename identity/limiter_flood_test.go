package identity_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/identity"
)

// A flood of single failures from fresh sources (one per /64 of a /48, or
// as many IPv4 addresses) makes the Limiter forget sources to bound its
// memory, but never a source it is refusing: the sources still in their
// lockout window are the last forgotten. Before, it forgot an arbitrary
// half, so a locked-out source came back after 65,536 cheap failures
// from elsewhere, and could guess again.
func TestLimiterFloodKeepsLockedOutSources(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	l := identity.NewLimiter(&identity.LimiterOptions{MaxFailures: 3, Window: time.Hour, Now: func() time.Time { return now }})
	locked := []string{"198.51.100.7:1", "[2001:db8:ffff:1::1]:1"}
	for _, remote := range locked {
		for range 3 {
			l.Fail(remote, true)
		}
		require.False(t, l.Allow(remote))
	}
	for i := range 3 * 65536 {
		l.Fail(fmt.Sprintf("[2001:db8:%x:%x::1]:443", i>>16, i&0xffff), true)
	}
	for _, remote := range locked {
		require.False(t, l.Allow(remote), "%s is still refused after the flood", remote)
	}
	now = now.Add(time.Hour)
	for _, remote := range locked {
		require.True(t, l.Allow(remote), "%s is let through once its window ends", remote)
	}
}
