package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestPublishActsInItsContractsRegion: a contract is negotiated for one
// region, and its rules were judged for it. A publish under it naming
// another region (an HTTP request's x-pigeon-region, a Caller built by
// hand) is refused, so that region cannot take a message of its own region
// past crossRegion: deny; a caller naming no region acts in the
// contract's, its message's region defaulting to it, and crossRegion:
// deny still holds.
func TestPublishActsInItsContractsRegion(t *testing.T) {
	f := newFixture(t)
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	k, err := f.e.Negotiate(ctx, p, "uk", []string{"payments.authorize"}, 0)
	require.NoError(t, err)
	n := 0
	payment := func(region string) *pigeon.Message {
		n++
		m := demo.Payment("o-region-" + string(rune('a'+n)))
		m.Region = region
		return m
	}
	for _, tc := range []struct {
		name, caller, message string
		code                  pigeon.Code // "" when accepted
		stored                string
	}{
		{"the contract's region", "uk", "", "", "uk"},
		{"another region, its own messages", "eu", "eu", pigeon.CodeRegionDenied, ""},
		{"another region, no region in the message", "eu", "", pigeon.CodeRegionDenied, ""},
		{"no region: the contract's", "", "", "", "uk"},
		{"no region, a message of another", "", "eu", pigeon.CodeRegionDenied, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.e.Publish(ctx, pigeon.Caller{Principal: p, Region: tc.caller, ContractID: k.ID()}, payment(tc.message))
			if tc.code != "" {
				pe := requireCode(t, err, tc.code)
				require.Contains(t, []string{pigeon.GateContract, pigeon.GateRegion}, pe.Decision.Gate, "%v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.stored, res.Message.Region)
		})
	}
}
