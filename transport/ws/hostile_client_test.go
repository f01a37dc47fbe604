package ws_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// A batch is judged message by message: a malformed message, a message on
// a subject outside the contract, one repeating an earlier message's id or
// idempotency key are refused (or answered duplicate) in their own slots,
// and every message accepted beside them is stored once.
func TestHostileBatchRefusesOnlyTheOffendingMessages(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	chat := func(extra string) string {
		return `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}` + extra + `}`
	}
	f := alice.ok(ws.OpPublishBatch, `,"messages":[`+
		chat(``)+`,`+
		`{"type":5},`+
		`{"type":"job","subject":"jobs.run","intent":"run","data":{}},`+
		chat(`,"id":"msg_chosen_1"`)+`,`+
		chat(`,"id":"msg_chosen_1"`)+`,`+
		chat(`,"idempotencyKey":"k-1"`)+`,`+
		chat(`,"idempotencyKey":"k-1"`)+`,`+
		`null,`+
		`{"type":"chat","subject":"chat.messages","intent":"chat","Data":{"text":"hi"}},`+
		`{"type":"chat","subject":5,"intent":"chat","data":{}},`+
		`[],`+
		chat(``)+`]`, ws.OpDecisions)
	require.Len(t, f.Results, 12)
	code := func(i int) pigeon.Code {
		if f.Results[i].Error == nil {
			return ""
		}
		return f.Results[i].Error.Code
	}
	require.Equal(t, pigeon.StatusAccepted, f.Results[0].Status)
	require.Equal(t, pigeon.CodeEnvelopeInvalid, code(1))
	require.Equal(t, pigeon.CodeSubjectNotInContract, code(2))
	require.Equal(t, pigeon.StatusAccepted, f.Results[3].Status)
	require.NotEmpty(t, code(4), "a repeated id is refused: %+v", f.Results[4])
	require.Equal(t, pigeon.StatusAccepted, f.Results[5].Status)
	require.Equal(t, pigeon.StatusDuplicate, f.Results[6].Status, "%+v", f.Results[6])
	require.Equal(t, f.Results[5].Message.ID, f.Results[6].Message.ID)
	require.Equal(t, pigeon.CodeEnvelopeInvalid, code(7))
	for i := 8; i < 11; i++ {
		require.Equal(t, pigeon.CodeEnvelopeInvalid, code(i), "slot %d", i)
	}
	require.Equal(t, pigeon.StatusAccepted, f.Results[11].Status)
	_, last, err := v.st.Bounds(context.Background(), "chat.messages")
	require.NoError(t, err)
	require.EqualValues(t, 4, last, "four messages stored, once each")
	_, last, err = v.st.Bounds(context.Background(), "jobs.run")
	require.NoError(t, err)
	require.Zero(t, last)
}

// Acks name deliveries of one subscription of one connection: another
// connection of the same principal, another subscription of the same
// connection, a subscription already ended and ids never delivered settle
// nothing, and the delivery stays pending for its own subscription.
func TestAcksSettleOnlyTheirOwnSubscriptionsDeliveries(t *testing.T) {
	v := newEnv(t, nil, longAckWait)
	boss := v.raw(t, "boss-token")
	boss.negotiate("jobs.run")
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	other := v.raw(t, "crew-token")
	other.negotiate("jobs.run")
	sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"a","window":1`, ws.OpSubscribed).Sub
	sub2 := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"b","window":1`, ws.OpSubscribed).Sub
	gone := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"c","window":1`, ws.OpSubscribed).Sub
	boss.ok(ws.OpPublish, `,"message":{"type":"job","subject":"jobs.run","intent":"run","data":{}}`, ws.OpDecision)
	got := map[string]string{}
	for len(got) < 3 {
		d := crew.push()
		require.Equal(t, ws.OpDeliver, d.Op)
		got[d.Sub] = d.Message.ID
	}
	id := got[sub]
	crew.ok(ws.OpUnsubscribe, `,"sub":"`+gone+`"`, ws.OpOK)
	for _, tc := range []struct {
		name string
		r    *rawClient
		body string
		code pigeon.Code
	}{
		{"another connection", other, `,"sub":"` + sub + `","messageId":"` + id + `"`, pigeon.CodeBadRequest},
		{"another connection, many", other, `,"sub":"` + sub + `","messageIds":["` + id + `"]`, pigeon.CodeBadRequest},
		// BAD_REQUEST once the subscription is gone from the connection,
		// ACK_NOT_ALLOWED while it is still ending: either settles nothing.
		{"ended subscription", crew, `,"sub":"` + gone + `","messageId":"` + got[gone] + `"`, pigeon.CodeBadRequest + "|" + pigeon.CodeAckNotAllowed},
		{"never delivered", crew, `,"sub":"` + sub + `","messageId":"msg_never"`, pigeon.CodeAckNotAllowed},
		{"sub as a number", crew, `,"sub":1,"messageId":"` + id + `"`, pigeon.CodeBadRequest},
		{"ids not strings", crew, `,"sub":"` + sub + `","messageIds":[1,2]`, pigeon.CodeBadRequest},
		{"sub twice", crew, `,"sub":"` + sub2 + `","sub":"` + sub + `","messageId":"` + id + `"`, pigeon.CodeDuplicateKey},
		{"messageId twice", crew, `,"sub":"` + sub + `","messageId":"msg_never","messageId":"` + id + `"`, pigeon.CodeDuplicateKey},
		{"ids not an array", crew, `,"sub":"` + sub + `","messageIds":"` + id + `"`, pigeon.CodeBadRequest},
		{"ids an object", crew, `,"sub":"` + sub + `","messageIds":{"a":"` + id + `"}`, pigeon.CodeBadRequest},
		{"nack delay as text", crew, `,"sub":"` + sub + `","messageId":"` + id + `","delayMs":"5"`, pigeon.CodeBadRequest},
		{"nack delay overflowing", crew, `,"sub":"` + sub + `","messageId":"` + id + `","delayMs":99999999999999999999`, pigeon.CodeBadRequest},
		{"nack delay negative", crew, `,"sub":"` + sub + `","messageId":"` + id + `","delayMs":-1`, pigeon.CodeInvalidArgument},
		{"nack delay beyond the maximum", crew, `,"sub":"` + sub + `","messageId":"` + id + `","delayMs":9223372036854775807`, pigeon.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := ws.OpAck
			if strings.Contains(tc.name, "nack") {
				op = ws.OpNack
			}
			f := tc.r.call(op, tc.body)
			require.Equal(t, ws.OpError, f.Op, "answer %+v", f)
			require.NotNil(t, f.Error)
			require.Contains(t, strings.Split(string(tc.code), "|"), string(f.Error.Code), "error %+v", f.Error)
		})
	}
	// sub2's own delivery of the same message is not sub's.
	ok := crew.ok(ws.OpAck, `,"sub":"`+sub2+`","messageIds":["`+got[sub2]+`","`+got[sub2]+`"]`, ws.OpOK)
	require.Equal(t, []string{got[sub2]}, ok.NotPending, "an id twice settles once")
	// Still pending on its own subscription.
	crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+id+`"`, ws.OpOK)
}

// A subscription's window and maxInFlight are bounded: zero takes the
// default, and negative, huge, fractional or mistyped values are refused
// without starting a subscription.
func TestSubscribeWindowBounds(t *testing.T) {
	v := newEnv(t, nil)
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	for _, tc := range []struct {
		name, body string
		code       pigeon.Code
	}{
		{"window zero", `,"window":0`, ""},
		{"both zero", `,"window":0,"maxInFlight":0`, ""},
		{"window negative", `,"window":-1`, pigeon.CodeInvalidArgument},
		{"maxInFlight negative", `,"maxInFlight":-1`, pigeon.CodeInvalidArgument},
		{"maxInFlight negative beside a window", `,"window":5,"maxInFlight":-1`, pigeon.CodeInvalidArgument},
		{"window huge", `,"window":10001`, pigeon.CodeInvalidArgument},
		{"maxInFlight huge", `,"maxInFlight":10001`, pigeon.CodeInvalidArgument},
		{"window beyond int", `,"window":99999999999999999999`, pigeon.CodeBadRequest},
		{"window min int", `,"window":-9223372036854775808`, pigeon.CodeInvalidArgument},
		{"window fractional", `,"window":1.5`, pigeon.CodeBadRequest},
		{"window exponent", `,"window":1e3`, pigeon.CodeBadRequest},
		{"window string", `,"window":"10"`, pigeon.CodeBadRequest},
		{"window twice", `,"window":1,"window":10000`, pigeon.CodeDuplicateKey},
		{"ack unknown", `,"ack":"sometimes"`, pigeon.CodeInvalidArgument},
		{"at most once on a work queue", `,"ack":"none"`, pigeon.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `,"subject":"jobs.run","group":"g"` + tc.body
			if tc.code == "" {
				sub := crew.ok(ws.OpSubscribe, body, ws.OpSubscribed).Sub
				crew.ok(ws.OpUnsubscribe, `,"sub":"`+sub+`"`, ws.OpOK)
				return
			}
			crew.fail(ws.OpSubscribe, body, tc.code)
		})
	}
}

// A client sends only client ops: an answer op or a push (reply, deliver,
// decisions…) is refused, and acts on nothing.
func TestClientCannotSendServerOps(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	for _, op := range []string{ws.OpReply, ws.OpDeliver, ws.OpDeliverBatch, ws.OpDecision, ws.OpDecisions, ws.OpUnsubscribed, ws.OpContract, ws.OpOK, ws.OpError} {
		t.Run(op, func(t *testing.T) {
			alice.fail(op, `,"re":"x","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{}}`, pigeon.CodeBadRequest)
		})
	}
}

// A duplicate's slot carries the original message, whose data the batch
// did not send: a batch of a thousand small messages repeating the
// idempotency key of one large message drew an answer a thousand times
// that message (a 94 KB frame, a 256 MiB answer, built whole in memory).
// A decisions answer holds at most about twice the largest frame in
// duplicates' data; the duplicates beyond are refused PAYLOAD_TOO_LARGE
// in their slots (nothing was stored for them: publishing one again
// alone answers it whole), and the messages accepted beside them stay
// accepted.
func TestBatchOfDuplicatesCannotAmplifyTheAnswer(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	big := strings.Repeat("x", 32<<10)
	orig := alice.ok(ws.OpPublish, `,"message":{"type":"chat","subject":"chat.messages","intent":"chat","idempotencyKey":"K","data":{"text":"`+big+`"}}`, ws.OpDecision)
	dup := `{"type":"chat","subject":"chat.messages","intent":"chat","idempotencyKey":"K","data":{}}`
	fresh := `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"new"}}`
	msgs := strings.Repeat(dup+",", ws.MaxPublishBatch-2) + fresh + "," + dup
	alice.write(`{"op":"publish_batch","id":"b","brief":true,"messages":[` + msgs + `]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, b, err := alice.c.Read(ctx)
	require.NoError(t, err)
	limit := 2*ws.DefaultMaxFrame + ws.MaxPublishBatch*1024
	require.LessOrEqual(t, len(b), limit, "the answer is bounded")
	var f ws.Frame
	require.NoError(t, json.Unmarshal(b, &f))
	require.Equal(t, ws.OpDecisions, f.Op)
	require.Len(t, f.Results, ws.MaxPublishBatch)
	require.Equal(t, pigeon.StatusDuplicate, f.Results[0].Status)
	require.Equal(t, orig.Message.ID, f.Results[0].Message.ID)
	require.JSONEq(t, string(orig.Message.Data), string(f.Results[0].Message.Data), "the first duplicates carry the original whole")
	require.Equal(t, pigeon.StatusAccepted, f.Results[ws.MaxPublishBatch-2].Status, "a message accepted beside them stays accepted")
	last := f.Results[ws.MaxPublishBatch-1]
	require.NotNil(t, last.Error)
	require.Equal(t, pigeon.CodePayloadTooLarge, last.Error.Code)
	_, seq, err := v.st.Bounds(context.Background(), "chat.messages")
	require.NoError(t, err)
	require.EqualValues(t, 2, seq, "the original and the fresh message, nothing more")
	// Alone, the duplicate is answered whole.
	again := alice.ok(ws.OpPublish, `,"message":`+dup, ws.OpDecision)
	require.Equal(t, pigeon.StatusDuplicate, again.Status)
	require.JSONEq(t, string(orig.Message.Data), string(again.Message.Data))
}
