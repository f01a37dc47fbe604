package ws_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/ws"
)

// TestWaitingRequestsBoundedPerPrincipal: a request waiting for its reply
// holds its message for up to MaxRequestTimeout, and MaxInFlight bounds
// them per connection only, so a principal with MaxConnectionsPerPrincipal
// connections held that many times more (256 requests of up to a 1 MiB
// frame on each of 1,000 connections). MaxRequestBytesPerPrincipal bounds
// them over all the principal's connections: beyond it a request is
// RATE_LIMITED before it is published, here from another connection of
// the principal and from the same one, and room comes back as a request
// ends. Before, the second connection's request was published and waited
// (REQUEST_TIMEOUT).
func TestWaitingRequestsBoundedPerPrincipal(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxRequestBytesPerPrincipal: 1}) // one request waiting per principal
	gateway := v.raw(t, "gateway-token")
	gateway.negotiate("payments.authorize")
	sub := gateway.ok(ws.OpSubscribe, `,"subject":"payments.authorize"`, ws.OpSubscribed).Sub

	a := v.raw(t, "checkout-token")
	a.negotiate("payments.authorize")
	b := v.raw(t, "checkout-token")
	b.negotiate("payments.authorize")
	a.write(`{"op":"request","id":"r1","timeoutMs":60000,"message":` + msgJSON(t, demo.Payment("o-1")) + `}`)
	a.ok(ws.OpPing, "", ws.OpPong) // the server read r1 before the ping
	req := decodeMsg(t, gateway.push().Message)

	f := b.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-2")), pigeon.CodeRateLimited)
	require.Contains(t, f.Error.Message, "MaxRequestBytesPerPrincipal")
	a.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-3")), pigeon.CodeRateLimited)
	require.Positive(t, v.srv.Stats().RateLimited)

	gateway.ok(ws.OpPublish, `,"message":`+msgJSON(t, demo.Approval(req.ID)), ws.OpDecision)
	gateway.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+req.ID+`"`, ws.OpOK)
	require.Equal(t, ws.OpReply, a.answer("r1").Op)

	// r1 answered: its room is back, for either connection.
	b.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-4")), pigeon.CodeRequestTimeout)
	a.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-5")), pigeon.CodeRequestTimeout)
}

// A connection that drops while one of its requests waits for a reply is
// torn down at once, and the request with it: its hold on the principal's
// request bytes comes back then, not when its timeout ends. (The request
// may run on the goroutine that read its frame, which was the connection's
// own: the teardown must not wait for that goroutine.)
func TestDroppedConnectionEndsItsWaitingRequest(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxRequestBytesPerPrincipal: 1}) // one request waiting per principal
	a := v.raw(t, "checkout-token")
	a.negotiate("payments.authorize")
	a.write(`{"op":"request","id":"r1","timeoutMs":600000,"message":` + msgJSON(t, demo.Payment("o-1")) + `}`)
	a.ok(ws.OpPing, "", ws.OpPong) // the server read r1 before the ping
	b := v.raw(t, "checkout-token")
	b.negotiate("payments.authorize")
	b.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-2")), pigeon.CodeRateLimited)

	require.NoError(t, a.c.CloseNow())
	require.Eventually(t, func() bool {
		f := b.call(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-3")))
		return f.Error != nil && f.Error.Code == pigeon.CodeRequestTimeout
	}, 20*time.Second, 50*time.Millisecond, "r1 still holds the principal's request bytes")
}
