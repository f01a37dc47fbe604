package ws_test

import (
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
