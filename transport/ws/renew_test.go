package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestRenewFrame: renew moves the expiry of the contract in force and
// answers it, its id unchanged; without a contract it is CONTRACT_REQUIRED,
// and a ttlMs beyond the broker's maximum INVALID_ARGUMENT.
func TestRenewFrame(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.fail(ws.OpRenew, "", pigeon.CodeContractRequired)
	info := r.negotiate("chat.messages")
	f := r.ok(ws.OpRenew, `,"ttlMs":3600000`, ws.OpContract)
	var renewed pigeon.ContractInfo
	require.NoError(t, json.Unmarshal(f.Contract, &renewed))
	require.Equal(t, info.ID, renewed.ID)
	require.True(t, renewed.ExpiresAt.After(info.ExpiresAt.Add(30*time.Minute)), "%v", renewed.ExpiresAt)
	r.fail(ws.OpRenew, `,"ttlMs":`+strconv.FormatInt((48*time.Hour).Milliseconds(), 10), pigeon.CodeInvalidArgument)
}

// TestRenewalStopsWhenRefusedForGood: a session whose contract was revoked
// asks to renew it once, is refused CONTRACT_REVOKED, and asks no more,
// where a failure that may pass is tried again every few seconds until
// the contract expires (each try audited, and counted toward the
// negotiation rate).
func TestRenewalStopsWhenRefusedForGood(t *testing.T) {
	const ttl = 1200 * time.Millisecond
	v := newEnv(t, nil)
	s := v.dial(t, "alice-token", []string{"chat.messages"}, ws.WithConnectOptions(pigeon.WithContractTTL(ttl)))
	k := s.Contract()
	require.NoError(t, v.e.RevokeContract(context.Background(), &pigeon.Principal{ID: k.Principal()}, k.ID()))
	denied := func() int {
		recs, err := v.e.Audit(context.Background(), 0, 100000)
		require.NoError(t, err)
		n := 0
		for _, r := range recs {
			if r.Type == string(pigeon.EventContractDenied) && r.ContractID == k.ID() {
				n++
			}
		}
		return n
	}
	eventually(t, func() bool { return denied() > 0 }, "the renewal is tried")
	time.Sleep(time.Until(k.ExpiresAt()) + 200*time.Millisecond) // past the expiry: every retry would have come
	require.Equal(t, 1, denied(), "one try, not one every few hundred milliseconds")
}

func TestRenewalFinal(t *testing.T) {
	for _, tc := range []struct {
		code  pigeon.Code
		final bool
	}{
		{pigeon.CodeContractRevoked, true}, {pigeon.CodeContractExpired, true}, {pigeon.CodeContractNotFound, true},
		{pigeon.CodeContractPrincipalMismatch, true}, {pigeon.CodeContractStale, true}, {pigeon.CodeGrantRevoked, true},
		{pigeon.CodeUnauthenticated, true},
		{pigeon.CodeRateLimited, false}, {pigeon.CodeInternal, false}, {pigeon.CodeStoreNoQuorum, false},
		{pigeon.CodeSessionClosed, false}, {pigeon.CodeShutdown, false},
	} {
		require.Equal(t, tc.final, pigeon.RenewalFinal(pigeon.NewError(tc.code, "x")), "%s", tc.code)
	}
	require.False(t, pigeon.RenewalFinal(nil))
}
