package pigeon_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestMessageByIDTellsNoIDsOutsideTheContract: Engine.Message answered a
// caller whose contract does not let it receive a message with the
// contract's refusal (SUBJECT_NOT_IN_CONTRACT for a subject it never
// negotiated, OPERATION_NOT_IN_CONTRACT for one it may only publish on)
// and an id never seen with MESSAGE_NOT_FOUND, and with a dead contract
// (revoked) an id never seen still answered MESSAGE_NOT_FOUND: either way
// the answer told which ids exist (an order id another tenant chose) and
// on which kind of subject; a caller without a principal made it
// dereference nil. Now a held id the caller may not read is answered as
// one never seen, and a contract refusal comes whatever the id.
func TestMessageByIDTellsNoIDsOutsideTheContract(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	orders := f.connect("orders-token", "notifications.send")
	res, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	caller := callerOf
	revoked := caller(gateway)
	require.NoError(t, f.e.RevokeContract(ctx, revoked.Principal, revoked.ContractID))
	stranger := caller(orders)
	stranger.ContractID = revoked.ContractID // another principal's contract

	for _, tc := range []struct {
		name string
		c    pigeon.Caller
		code pigeon.Code
	}{
		{"a subject not in the contract", caller(orders), pigeon.CodeMessageNotFound},
		{"a subject the contract only publishes on", caller(checkout), pigeon.CodeMessageNotFound},
		{"a revoked contract", revoked, pigeon.CodeContractRevoked},
		{"another principal's contract", stranger, pigeon.CodeContractPrincipalMismatch},
		// A typed refusal, not a nil dereference.
		{"no principal", pigeon.Caller{ContractID: caller(checkout).ContractID}, pigeon.CodeContractPrincipalMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.e.Message(ctx, tc.c, res.Message.ID)
			held := requireCode(t, err, tc.code)
			_, err = f.e.Message(ctx, tc.c, "msg-never-seen")
			never := requireCode(t, err, tc.code)
			require.Equal(t, strings.ReplaceAll(never.Message, "msg-never-seen", "ID"), strings.ReplaceAll(held.Message, res.Message.ID, "ID"),
				"the held id is answered as the one never seen")
		})
	}
}
