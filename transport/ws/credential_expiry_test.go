package ws_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestCredentialExpiryEndsTheSession: a WebSocket connection authenticates
// once, at its upgrade, with a credential that expires (a JWT's exp, a
// client certificate's NotAfter). When the credential expires, so does
// everything it admitted, at that instant: the live subscription ends
// with CONTRACT_EXPIRED though no delivery woke it, a publish is refused
// CONTRACT_EXPIRED, and negotiating a new contract on the connection is
// refused UNAUTHENTICATED. Before, all of it went on for the contract's
// TTL (15 minutes), and the connection could negotiate again after that.
func TestCredentialExpiryEndsTheSession(t *testing.T) {
	const life = 1500 * time.Millisecond // room for the steps before it, under -race
	var expiresAt atomic.Int64           // unix ns; read by the server's goroutines
	v := newEnv(t, nil, func(o *pigeon.Options) {
		static := o.Authenticator
		o.Authenticator = pigeon.AuthenticatorFunc(func(ctx context.Context, credential string) (*pigeon.Principal, error) {
			p, err := static.Authenticate(ctx, credential)
			if err != nil || credential != "bob-token" {
				return p, err
			}
			q := *p // bob's credential expires, as a JWT would
			q.Expires = time.Unix(0, expiresAt.Load())
			return &q, nil
		})
	})
	ctx := context.Background()
	expires := time.Unix(0, time.Now().Add(life).UnixNano())
	expiresAt.Store(expires.UnixNano())
	bob := v.raw(t, "bob-token")
	info := bob.negotiate("chat.messages")
	require.True(t, info.ExpiresAt.Equal(expires), "the contract expires with the credential (%v), not at its TTL: %v", expires, info.ExpiresAt)
	sub := bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","ack":"none"`, ws.OpSubscribed).Sub

	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"}) // hers does not expire
	require.NoError(t, err)
	defer alice.Close(ctx)
	_, err = alice.Publish(ctx, chatMsg("live"))
	require.NoError(t, err)
	d := bob.push()
	require.Equal(t, ws.OpDeliver, d.Op)
	require.JSONEq(t, string(chatMsg("live").Data), string(decodeMsg(t, d.Message).Data))

	// Nothing more is published: the subscription ends by itself.
	end := bob.push()
	require.Equal(t, ws.OpUnsubscribed, end.Op, "frame %+v", end)
	require.Equal(t, sub, end.Sub)
	require.NotNil(t, end.Error)
	require.Equal(t, pigeon.CodeContractExpired, end.Error.Code)
	require.False(t, time.Now().Before(expires), "ended before the credential expired")

	_, err = alice.Publish(ctx, chatMsg("late"))
	require.NoError(t, err)
	bob.fail(ws.OpPublish, `,"message":`+msgJSON(t, chatMsg("mine")), pigeon.CodeContractExpired)
	refused := bob.fail(ws.OpNegotiate, `,"subjects":["chat.messages"]`, pigeon.CodeUnauthenticated)
	require.Contains(t, refused.Error.Message, "credential has expired")
	bob.fail(ws.OpSubscribe, `,"subject":"chat.messages","ack":"none"`, pigeon.CodeContractExpired)
	require.Empty(t, bob.pushes, "nothing pushed after the expiry")

	// A fresh credential (here: a new connection, authenticated anew while
	// the old one is still refused) is the way back.
	expiresAt.Store(time.Now().Add(time.Hour).UnixNano())
	fresh := v.raw(t, "bob-token")
	fresh.negotiate("chat.messages")
}
