package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestReplyReceipts: a reply is handed over only while the requester's
// contract still allows the subject. It is never in its subject's log,
// yet its receipts name who got it and when: a reply.delivered record of
// it to the requester, the request's id in ref. A reply dropped because
// the requester's contract was revoked while it waited (reply.dropped) is
// no receipt.
func TestReplyReceipts(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		t.Run(map[bool]string{false: "handed over", true: "dropped"}[revoke], func(t *testing.T) {
			f := newFixture(t)
			checkout := f.connect("checkout-token", "payments.authorize")
			gateway := f.connect("gateway-token", "payments.authorize")
			done := make(chan error, 1)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			go func() {
				_, err := checkout.Request(rctx, demo.Payment("o-1"))
				done <- err
			}()
			req := receiveOne(t, gateway, "payments.authorize")
			if revoke {
				p := checkout.(interface{ Caller() pigeon.Caller }).Caller().Principal
				require.NoError(t, f.e.RevokeContract(ctx, p, checkout.Contract().ID()))
			}
			res, err := gateway.Publish(ctx, demo.Approval(req.ID))
			require.NoError(t, err)
			err = <-done
			if revoke {
				requireCode(t, err, pigeon.CodeContractRevoked)
				require.Equal(t, 1, auditCount(t, f.e, pigeon.EventReplyDropped, pigeon.CodeContractRevoked))
				rs, err := f.e.Receipts(ctx, res.Message.ID)
				require.NoError(t, err)
				require.Empty(t, rs)
				return
			}
			require.NoError(t, err)
			var rs []pigeon.Receipt
			require.Eventually(t, func() bool {
				rs, err = f.e.Receipts(ctx, res.Message.ID)
				return err == nil && len(rs) > 0
			}, 10*time.Second, time.Millisecond)
			require.Len(t, rs, 1)
			require.Equal(t, pigeon.EventReplyDelivered, rs[0].Event)
			require.Equal(t, demo.Checkout, rs[0].Principal)
			require.Equal(t, checkout.Contract().ID(), rs[0].ContractID)
			require.Equal(t, req.ID, rs[0].Ref)
			require.Equal(t, "payments.authorize", rs[0].Subject)
			require.Zero(t, rs[0].Seq, "a reply has no place in the subject's log")

			// The request's receipts are the responder's.
			rs, err = f.e.Receipts(ctx, req.ID)
			require.NoError(t, err)
			require.NotEmpty(t, rs)
			require.Equal(t, pigeon.EventDeliveryDispatched, rs[0].Event)
			require.Equal(t, demo.Gateway, rs[0].Principal)
		})
	}
}
