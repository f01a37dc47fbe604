package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestRecheck: Engine.Recheck answers whether a contract still allows an
// operation, for a transport about to write what an earlier call
// returned; each refusal carries the contract's code and is audited as
// the event of what it withholds.
func TestRecheck(t *testing.T) {
	f := newFixture(t)
	p, err := f.e.Authenticate(ctx, "notifier-token")
	require.NoError(t, err)
	k, err := f.e.Negotiate(ctx, p, "uk", []string{"notifications.send"}, 0)
	require.NoError(t, err)
	c := pigeon.Caller{Principal: p, Region: "uk", ContractID: k.Info().ID}

	require.NoError(t, f.e.Recheck(ctx, c, "notifications.send", pigeon.OpReceive))
	for _, tc := range []struct {
		name    string
		c       pigeon.Caller
		subject string
		op      pigeon.Operation
		code    pigeon.Code
		event   pigeon.Event // "": not audited
	}{
		{"a reply the contract may not have", c, "notifications.send", pigeon.OpPublish, pigeon.CodeOperationNotInContract, pigeon.EventReplyDropped},
		{"a replay it may not make", c, "notifications.send", pigeon.OpReplay, pigeon.CodeOperationNotInContract, pigeon.EventReplayDenied},
		{"a subject outside it", c, "payments.authorize", pigeon.OpReceive, pigeon.CodeSubjectNotInContract, pigeon.EventReceiveDenied},
		{"no principal", pigeon.Caller{ContractID: c.ContractID}, "notifications.send", pigeon.OpReceive, pigeon.CodeContractPrincipalMismatch, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireCode(t, f.e.Recheck(ctx, tc.c, tc.subject, tc.op), tc.code)
			if tc.event != "" {
				require.Eventually(t, func() bool { return auditCount(t, f.e, tc.event, tc.code) == 1 }, 5*time.Second, 10*time.Millisecond)
			}
		})
	}

	require.NoError(t, f.e.RevokeContract(ctx, p, c.ContractID))
	requireCode(t, f.e.Recheck(ctx, c, "notifications.send", pigeon.OpReceive), pigeon.CodeContractRevoked)
	require.Eventually(t, func() bool { return auditCount(t, f.e, pigeon.EventReceiveDenied, pigeon.CodeContractRevoked) == 1 }, 5*time.Second, 10*time.Millisecond)
}
