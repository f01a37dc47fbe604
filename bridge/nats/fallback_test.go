package natsbridge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// The bridge checks a contract's renewal only after the session's own
// renewal is due (pigeon.RenewLead ahead of the expiry), with room for a
// retry, and before the contract expires: it never races the session to
// a renewal the session is about to make.
func TestFallbackComesAfterTheSessionsRenewal(t *testing.T) {
	for _, life := range []time.Duration{600 * time.Millisecond, 2 * time.Second, 10 * time.Second,
		50 * time.Second, 15 * time.Minute, 24 * time.Hour} {
		exp := time.Now().Add(life)
		fallback := untilFallback(exp)
		left := time.Until(exp)
		renews := left - pigeon.RenewLead(left)
		require.Greater(t, fallback-renews, pigeon.RenewLead(left)/4, "%v: the session renews first, with room to retry", life)
		require.Less(t, fallback, left, "%v: before the expiry", life)
	}
}
