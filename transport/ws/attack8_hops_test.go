package ws_test

import (
	"testing"

	"github.com/stretchr/testify/require"

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
