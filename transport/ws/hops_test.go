package ws_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// TestPublisherCannotSetHopsOverWebSocket: a publisher's "hops" (how many
// programs deep a message is, which the broker sets) is not what the
// broker stores and delivers, in a publish or a batch: a client that
// wrote 0 could restart a loop of programs, one that wrote a large number
// could have the programs' emits refused. The Go client decodes the
// member (the frame decoder's walker reads it), so a delivery that kept
// it would show here.
func TestPublisherCannotSetHopsOverWebSocket(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	bob := v.raw(t, "bob-token")
	bob.negotiate("chat.messages")
	sub := bob.ok(ws.OpSubscribe, `,"subject":"chat.messages"`, ws.OpSubscribed).Sub

	const msg = `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"},"hops":99}`
	published := decodeMsg(t, alice.ok(ws.OpPublish, `,"message":`+msg, ws.OpDecision).Message)
	require.Zero(t, published.Hops, "the decision")
	batch := alice.ok(ws.OpPublishBatch, `,"messages":[`+msg+`,`+msg+`]`, ws.OpDecisions)
	require.Len(t, batch.Results, 2)
	ids := []string{published.ID}
	for _, r := range batch.Results {
		require.Nil(t, r.Error)
		require.Zero(t, decodeMsg(t, r.Message).Hops, "the batch's decision")
		ids = append(ids, r.Message.ID)
	}
	for _, id := range ids {
		d := bob.push()
		require.Equal(t, ws.OpDeliver, d.Op)
		m := decodeMsg(t, d.Message)
		require.Equal(t, id, m.ID)
		require.Zero(t, m.Hops, "delivered")
		bob.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+id+`"`, ws.OpOK)
	}
	sm, err := v.st.Lookup(t.Context(), published.ID)
	require.NoError(t, err)
	require.NotContains(t, string(sm.Body), `"hops"`, "stored: %s", sm.Body)
}

// TestFrameHopsNeedsTheBridgeRole: a publish or publish_batch frame's own
// "hops" (the depth the broker writes, pigeon.Message.Hops) is taken only
// from a principal holding pigeon.RoleBridge: any other's is refused
// FORBIDDEN, the frame whole, and nothing is stored, so that a client
// cannot pass its messages as a program's output or restart a loop's
// count by asking. A "hops" of 0 is every client's publish. The role is
// judged as the account stands at the frame: one taken away since the
// connection opened counts no more. A hops that is not a uint32 is
// refused BAD_REQUEST, as the frame's other integers are.
func TestFrameHopsNeedsTheBridgeRole(t *testing.T) {
	v := newEnv(t, nil)
	ctx := t.Context()
	const msg = `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"},"hops":99}`

	const refused = `{"id":"msg_refused_hops","type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}`
	bob := v.raw(t, "bob-token")
	bob.negotiate("chat.messages")
	for _, tc := range []struct {
		name, op, body string
	}{
		{"publish", ws.OpPublish, `,"hops":3,"message":` + refused},
		{"publish_batch", ws.OpPublishBatch, `,"hops":3,"messages":[` + refused + `]`},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			bob.fail(tc.op, tc.body, pigeon.CodeForbidden)
			_, err := v.st.Lookup(ctx, "msg_refused_hops")
			require.Error(t, err, "stored")
		})
	}
	zero := decodeMsg(t, bob.ok(ws.OpPublish, `,"hops":0,"message":`+msg, ws.OpDecision).Message)
	require.Zero(t, zero.Hops)
	_, err := v.dial(t, "bob-token", []string{"chat.messages"}).PublishAt(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages",
		Intent: "chat", Data: json.RawMessage(`{"text":"hi"}`)}, 3)
	require.Equal(t, pigeon.CodeForbidden, pigeon.ErrorCode(err), "%v", err)

	_, err = v.e.CreateAccount(ctx, pigeon.Account{ID: transporttest.Alice, Roles: []string{pigeon.RoleBridge}})
	require.NoError(t, err)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	published := decodeMsg(t, alice.ok(ws.OpPublish, `,"hops":3,"message":`+msg, ws.OpDecision).Message)
	require.Equal(t, uint32(3), published.Hops, "the decision")
	sm, err := v.st.Lookup(ctx, published.ID)
	require.NoError(t, err)
	require.Contains(t, string(sm.Body), `"hops":3`, "stored")
	batch := alice.ok(ws.OpPublishBatch, `,"hops":4294967295,"messages":[`+msg+`,`+msg+`]`, ws.OpDecisions)
	require.Len(t, batch.Results, 2)
	for _, r := range batch.Results {
		require.Nil(t, r.Error)
		require.Equal(t, uint32(4294967295), decodeMsg(t, r.Message).Hops, "the batch's decision")
	}
	res, err := v.dial(t, "alice-token", []string{"chat.messages"}).PublishAt(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages",
		Intent: "chat", Data: json.RawMessage(`{"text":"hi"}`), Hops: 1}, 5)
	require.NoError(t, err)
	require.Equal(t, uint32(5), res.Message.Hops, "the Go client's PublishAt")

	for _, bad := range []string{`-1`, `1.5`, `4294967296`, `"3"`, `true`} {
		alice.fail(ws.OpPublish, `,"hops":`+bad+`,"message":`+msg, pigeon.CodeBadRequest)
	}

	_, err = v.e.RemoveAccountRole(ctx, transporttest.Alice, pigeon.RoleBridge)
	require.NoError(t, err)
	alice.fail(ws.OpPublish, `,"hops":3,"message":`+msg, pigeon.CodeForbidden)
}

// TestRequestHopsNeedsTheBridgeRole: a request is published (admitted,
// stored, delivered) as a publish is, so its frame's "hops" follows the
// publish frame's rule: refused FORBIDDEN from a principal without
// pigeon.RoleBridge, before anything is stored, and honoured for one
// holding it, the request delivered at that depth. Before, a request's
// "hops" was read and silently dropped: the request went out at 0 from
// anyone, and a bridge's request restarted a loop's count.
func TestRequestHopsNeedsTheBridgeRole(t *testing.T) {
	v := newEnv(t, nil)
	ctx := t.Context()
	gateway := v.raw(t, "gateway-token")
	gateway.negotiate("payments.authorize")
	sub := gateway.ok(ws.OpSubscribe, `,"subject":"payments.authorize"`, ws.OpSubscribed).Sub
	checkout := v.raw(t, "checkout-token")
	checkout.negotiate("payments.authorize")

	refused := demo.Payment("o-refused")
	refused.ID = "msg_request_hops_refused"
	checkout.fail(ws.OpRequest, `,"hops":3,"timeoutMs":50,"message":`+msgJSON(t, refused), pigeon.CodeForbidden)
	_, err := v.st.Lookup(ctx, refused.ID)
	require.Error(t, err, "stored")

	_, err = v.e.CreateAccount(ctx, pigeon.Account{ID: demo.Checkout, Roles: []string{pigeon.RoleBridge}})
	require.NoError(t, err)
	checkout.write(`{"op":"request","id":"r1","hops":3,"timeoutMs":10000,"message":` + msgJSON(t, demo.Payment("o-1")) + `}`)
	req := decodeMsg(t, gateway.push().Message)
	require.Equal(t, uint32(3), req.Hops, "the request delivered")
	gateway.ok(ws.OpPublish, `,"message":`+msgJSON(t, demo.Approval(req.ID)), ws.OpDecision)
	gateway.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+req.ID+`"`, ws.OpOK)
	require.Equal(t, ws.OpReply, checkout.answer("r1").Op)
}
