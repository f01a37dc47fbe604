package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// batchInputs are the messages of one batch, good and bad mixed: every
// path a message of a batch can take.
func batchInputs() []*pigeon.Message {
	us := demo.Payment("o-us")
	us.Region = "us"
	pan := demo.Payment("o-pan")
	pan.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"o-pan","amount":1,"currency":"GBP","paymentToken":"tok_x","card":{"pan":"4111111111111111"}}`)
	schema := demo.Payment("o-schema")
	schema.Data = json.RawMessage(`{"merchantId":"m-100"}`)
	intent := demo.Payment("o-intent")
	intent.Intent = "refund"
	chosen := demo.Payment("o-chosen")
	chosen.ID = "msg_chosen_by_the_publisher"
	dupData := demo.Payment("o-dupkey")
	dupData.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"o-dupkey","amount":1,"amount":2,"currency":"GBP","paymentToken":"tok_x"}`)
	return []*pigeon.Message{
		demo.Payment("o-1"),
		us,
		demo.Payment("o-2"),
		pan,
		demo.Payment("o-1"), // the first one's key again: a duplicate of it
		schema,
		nil,
		intent,
		chosen,
		dupData,
		demo.Payment("o-3"),
		demo.Payment("o-3"),
		demo.Payment("o-4"),
	}
}

// TestPublishBatchAgreesWithPublish: a batch is answered message by
// message as Publish answers the same messages one after another (same
// statuses, same codes), and the messages it admits are stored in batch
// order, each with its acceptance record.
func TestPublishBatchAgreesWithPublish(t *testing.T) {
	one, oneStore := openDurable(t, t.TempDir(), nil)
	defer closeDurable(t, one, oneStore)
	batch, batchStore := openDurable(t, t.TempDir(), nil)
	defer closeDurable(t, batch, batchStore)

	s, err := one.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	var want []pigeon.Published
	for _, m := range batchInputs() {
		res, err := s.Publish(ctx, m)
		want = append(want, pigeon.Published{Result: res, Err: err})
	}

	bs, err := batch.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	who, err := batch.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	caller := pigeon.Caller{Principal: who, Region: "uk", ContractID: bs.Contract().ID()}
	got := batch.PublishBatch(ctx, caller, batchInputs())
	require.Len(t, got, len(want))

	var last uint64
	accepted := map[string]bool{}
	for i := range want {
		if want[i].Err != nil {
			require.Error(t, got[i].Err, "message %d", i)
			require.Equal(t, pigeon.ErrorCode(want[i].Err), pigeon.ErrorCode(got[i].Err), "message %d: %v", i, got[i].Err)
			continue
		}
		require.NoError(t, got[i].Err, "message %d", i)
		require.Equal(t, want[i].Result.Status, got[i].Result.Status, "message %d", i)
		require.Equal(t, want[i].Result.Message.Sequence, got[i].Result.Message.Sequence, "message %d", i)
		if got[i].Result.Status == pigeon.StatusAccepted {
			seq := got[i].Result.Message.Sequence
			require.Greater(t, seq, last, "message %d is stored after the ones before it", i)
			last = seq
			accepted[got[i].Result.Message.ID] = true
			m, err := batchStore.Lookup(ctx, got[i].Result.Message.ID)
			require.NoError(t, err)
			require.Equal(t, seq, m.Seq)
		}
	}
	require.Len(t, accepted, 5, "o-1, o-2, o-3, o-4 and the chosen id")

	_, err = batch.VerifyAudit(ctx)
	require.NoError(t, err)
	recs, err := batch.Audit(ctx, 0, 0)
	require.NoError(t, err)
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) {
			require.True(t, accepted[r.MessageID], "an acceptance record for each message accepted, and no other: %s", r.MessageID)
			delete(accepted, r.MessageID)
		}
	}
	require.Empty(t, accepted, "every accepted message has its record")
}

// TestPublishBatchOnMemory: on the memory store a batch is answered as
// the same messages published one by one.
func TestPublishBatchOnMemory(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	who, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	got := f.e.PublishBatch(ctx, pigeon.Caller{Principal: who, Region: "uk", ContractID: s.Contract().ID()}, batchInputs())
	require.Equal(t, pigeon.StatusAccepted, got[0].Result.Status)
	requireCode(t, got[1].Err, pigeon.CodeRegionDenied)
	require.Equal(t, pigeon.StatusDuplicate, got[4].Result.Status)
	require.Equal(t, got[0].Result.Message.ID, got[4].Result.Message.ID)
	requireCode(t, got[6].Err, pigeon.CodeEnvelopeInvalid)
}
