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

// TestSessionRenewsItsContract: a session whose contract lives 600 ms
// keeps working for three lifetimes, under the same contract: it renews
// it by itself, and its subscription, which runs under it, goes on. Dialed
// WithoutAutoRenew, the same session ends at the first expiry.
func TestSessionRenewsItsContract(t *testing.T) {
	ctx := context.Background()
	const life = 600 * time.Millisecond
	for _, auto := range []bool{true, false} {
		t.Run(map[bool]string{true: "renews itself", false: "without auto renew"}[auto], func(t *testing.T) {
			v := newEnv(t, nil)
			opts := []ws.Option{ws.WithConnectOptions(pigeon.WithContractTTL(life))}
			if !auto {
				opts = append(opts, ws.WithConnectOptions(pigeon.WithContractTTL(life), pigeon.WithoutAutoRenew()))
			}
			alice := v.dial(t, "alice-token", []string{"chat.messages"}, opts...)
			bob := v.dial(t, "bob-token", []string{"chat.messages"})
			k := alice.Contract()
			got := make(chan string, 64)
			sub, err := alice.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
				got <- string(d.Message.Data)
				return nil
			})
			require.NoError(t, err)

			end := time.Now().Add(3 * life)
			for i := 0; time.Now().Before(end); i++ {
				_, err := bob.Publish(ctx, chatMsg("n"+strconv.Itoa(i)))
				require.NoError(t, err)
				if !auto && time.Now().After(k.ExpiresAt()) {
					break
				}
				select {
				case m := <-got:
					require.Contains(t, m, "n"+strconv.Itoa(i))
				case <-time.After(10 * time.Second):
					t.Fatalf("message %d not delivered: %v", i, sub.Err())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !auto {
				select {
				case <-sub.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the subscription outlived its contract")
				}
				require.Equal(t, pigeon.CodeContractExpired, pigeon.ErrorCode(sub.Err()))
				return
			}
			require.NoError(t, sub.Err())
			require.Equal(t, k.ID(), alice.Contract().ID(), "renewed, not replaced")
			require.True(t, alice.Contract().ExpiresAt().After(k.ExpiresAt()))
			_, err = alice.Publish(ctx, chatMsg("mine"))
			require.NoError(t, err)
			recs, err := v.e.Audit(ctx, 0, 0)
			require.NoError(t, err)
			renewals := 0
			for _, r := range recs {
				if r.Type == string(pigeon.EventContractRenewed) && r.ContractID == k.ID() {
					renewals++
				}
			}
			require.GreaterOrEqual(t, renewals, 2)
		})
	}
}

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
