package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
)

// TestAcceptedEncodingIsStored: the encoding every transport sends of an
// accepted message (Result.AppendMessageJSON: the publisher's answer and
// every subscriber's delivery share it) is the stored envelope with the
// message's sequence and acceptance time, byte for byte, whether the
// message was published alone or in a batch.
func TestAcceptedEncodingIsStored(t *testing.T) {
	st := memory.New(nil)
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	pub := f.connect("checkout-token", "payments.authorize")
	sub := f.connect("gateway-token", "payments.authorize")
	_, err := sub.Subscribe(ctx, "payments.authorize", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)

	alone := demo.Payment("o-alone")
	alone.Data = json.RawMessage(` {"merchantId":"m-100", "orderId":"o-alone","amount":1,"currency":"GBP","paymentToken":"tok_\u00e9"} `)
	res, err := pub.Publish(ctx, alone)
	require.NoError(t, err)
	results := []*pigeon.Result{res}
	for _, p := range f.e.PublishBatch(ctx, callerOf(pub), []*pigeon.Message{demo.Payment("o-1"), demo.Payment("o-2"), demo.Payment("o-3")}) {
		require.NoError(t, p.Err)
		results = append(results, p.Result)
	}
	for _, res := range results {
		require.Equal(t, pigeon.StatusAccepted, res.Status)
		sm, err := st.Lookup(ctx, res.Message.ID)
		require.NoError(t, err)
		sent := string(res.AppendMessageJSON(nil))
		require.Equal(t, 1, strings.Count(sent, `,"sequence":`), sent)
		sent = strings.Replace(sent, `,"sequence":`+strconv.FormatUint(sm.Seq, 10), "", 1)
		sent = strings.Replace(sent, `,"acceptedAt":"`+res.Message.AcceptedAt+`"`, "", 1)
		require.Equal(t, string(sm.Body), sent, "what is sent is what is stored, with its sequence and acceptance time")
	}
}
