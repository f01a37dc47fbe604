package pigeon_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestOptionRatesMustBeFinite: an engine-wide rate whose PerSecond is NaN
// compared false with everything, so every take found a full bucket and
// the limit (of negotiations, filter compiles, quarantine copies: each a
// guard of the broker's cores or disk) was off though the option named
// one; +Inf did the same. New refuses both, INVALID_ARGUMENT naming the
// option; a negative PerSecond still means no limit, and a huge one with
// no burst still starts (its burst rounded within an int).
func TestOptionRatesMustBeFinite(t *testing.T) {
	set := map[string]func(o *pigeon.Options, r pigeon.RateLimitPolicy){
		"NegotiateRate":  func(o *pigeon.Options, r pigeon.RateLimitPolicy) { o.NegotiateRate = r },
		"FilterRate":     func(o *pigeon.Options, r pigeon.RateLimitPolicy) { o.FilterRate = r },
		"QuarantineRate": func(o *pigeon.Options, r pigeon.RateLimitPolicy) { o.QuarantineRate = r },
	}
	for name, apply := range set {
		for _, tc := range []struct {
			perSecond float64
			refused   bool
		}{
			{math.NaN(), true},
			{math.Inf(1), true},
			{math.Inf(-1), true},
			{-1, false},
			{1e300, false},
			{0.5, false},
		} {
			t.Run(fmt.Sprintf("%s/%v", name, tc.perSecond), func(t *testing.T) {
				o := &pigeon.Options{Catalog: demo.Catalog(), Authenticator: pigeon.NewStaticTokens(demo.Tokens()...)}
				apply(o, pigeon.RateLimitPolicy{PerSecond: tc.perSecond})
				e, err := pigeon.New(context.Background(), o)
				if tc.refused {
					pe := requireCode(t, err, pigeon.CodeInvalidArgument)
					require.Contains(t, pe.Error(), name)
					return
				}
				require.NoError(t, err, "PerSecond %v", tc.perSecond)
				require.NoError(t, e.Shutdown(context.Background()))
			})
		}
	}
}
