package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
)

// After a restart on a WAL store, a principal's live contracts from before
// it count against MaxContractsPerPrincipal at once (the store lists them,
// store.ContractLister), not only once they are used again; revoked and
// expired ones do not count.
func TestContractsCountedAfterRestart(t *testing.T) {
	const limit = 3
	cases := []struct {
		name string
		// before negotiates (and revokes) on the first engine; the clock
		// may move before the restart.
		before func(t *testing.T, e *pigeon.Engine, p *pigeon.Principal, clk *testclock.Clock)
		// free is how many more contracts the principal gets after the
		// restart before TOO_MANY_CONTRACTS.
		free int
	}{
		{"live contracts count", func(t *testing.T, e *pigeon.Engine, p *pigeon.Principal, _ *testclock.Clock) {
			for range limit {
				negotiateOK(t, e, p, time.Hour)
			}
		}, 0},
		{"revoked contracts do not count", func(t *testing.T, e *pigeon.Engine, p *pigeon.Principal, _ *testclock.Clock) {
			c := negotiateOK(t, e, p, time.Hour)
			negotiateOK(t, e, p, time.Hour)
			negotiateOK(t, e, p, time.Hour)
			require.NoError(t, e.RevokeContract(ctx, p, c.ID()))
		}, 1},
		{"expired contracts do not count", func(t *testing.T, e *pigeon.Engine, p *pigeon.Principal, clk *testclock.Clock) {
			negotiateOK(t, e, p, time.Minute)
			negotiateOK(t, e, p, time.Minute)
			negotiateOK(t, e, p, time.Hour)
			clk.Advance(2 * time.Minute)
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := newClock()
			e, st := openDurable(t, dir, clk.Now, capped(limit))
			p, err := e.Authenticate(ctx, "checkout-token")
			require.NoError(t, err)
			c.before(t, e, p, clk)
			closeDurable(t, e, st)

			// The old contracts are not used again: only the listing
			// at startup can count them.
			e, st = openDurable(t, dir, clk.Now, capped(limit))
			defer closeDurable(t, e, st)
			p, err = e.Authenticate(ctx, "checkout-token")
			require.NoError(t, err)
			for range c.free {
				negotiateOK(t, e, p, time.Hour)
			}
			_, err = e.Negotiate(ctx, p, "", []string{"payments.authorize"}, time.Hour)
			requireCode(t, err, pigeon.CodeTooManyContracts)
		})
	}
}

// capped lets each principal hold at most limit live contracts, with no
// negotiation rate limit.
func capped(limit int) func(*pigeon.Options) {
	return func(o *pigeon.Options) {
		o.MaxContractsPerPrincipal = limit
		o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: -1}
	}
}

func negotiateOK(t *testing.T, e *pigeon.Engine, p *pigeon.Principal, ttl time.Duration) pigeon.Contract {
	t.Helper()
	c, err := e.Negotiate(ctx, p, "", []string{"payments.authorize"}, ttl)
	require.NoError(t, err)
	return c
}
