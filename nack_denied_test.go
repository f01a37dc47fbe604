package pigeon_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestNackOfAnUnleasedMessageIsAudited: a nack of a message not leased to
// the caller was refused ACK_NOT_ALLOWED and left no trace, while the same
// refusal of an ack is audited as ack.denied: a consumer probing message
// ids with nacks went unseen. Both refusals are now audited, each naming
// the caller, the message's id and its sequence.
func TestNackOfAnUnleasedMessageIsAudited(t *testing.T) {
	cases := []struct {
		name   string
		ev     pigeon.Event
		answer func(s pigeon.Session, id string, seq uint64) error
	}{
		{"Ack", pigeon.EventAckDenied, func(s pigeon.Session, id string, _ uint64) error {
			return s.Ack(ctx, "payments.authorize", id)
		}},
		{"AckSequence", pigeon.EventAckDenied, func(s pigeon.Session, id string, seq uint64) error {
			return s.(pigeon.SequenceSettler).AckSequence(ctx, "payments.authorize", id, seq)
		}},
		{"Nack", pigeon.EventNackDenied, func(s pigeon.Session, id string, _ uint64) error {
			return s.Nack(ctx, "payments.authorize", id, 0)
		}},
		{"NackSequence", pigeon.EventNackDenied, func(s pigeon.Session, id string, seq uint64) error {
			return s.(pigeon.SequenceSettler).NackSequence(ctx, "payments.authorize", id, seq, 0)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			pub := f.connect("checkout-token", "payments.authorize")
			res, err := pub.Publish(ctx, demo.Payment("o"))
			require.NoError(t, err)
			gw := f.connect("gateway-token", "payments.authorize")
			// Nobody received it: it is leased to nobody.
			requireCode(t, c.answer(gw, res.Message.ID, res.Message.Sequence), pigeon.CodeAckNotAllowed)

			recs := auditOf(t, f.e, c.ev)
			require.Len(t, recs, 1, "the refusal is audited")
			r := recs[0]
			require.Equal(t, string(pigeon.OutcomeDeny), r.Outcome)
			require.Equal(t, string(pigeon.CodeAckNotAllowed), r.Code)
			require.Equal(t, demo.Gateway, r.Principal)
			require.Equal(t, "payments.authorize", r.Subject)
			require.Equal(t, res.Message.ID, r.MessageID)
			require.Equal(t, strconv.FormatUint(res.Message.Sequence, 10), r.Seqs, "the message's sequence, as the other records of one message")
			require.Zero(t, r.Count)

			// The refusal settled nothing: the message is still there to receive.
			got, err := gw.Receive(ctx, "payments.authorize", 1)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, res.Message.ID, got[0].ID)
		})
	}
}
