package ws

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAckFrameIsTheJSONFrame: the ack frames the client renders by hand
// are, byte for byte, those encoding/json rendered from a Frame: one ack
// (with its sequence, or without one when it names none), several (a
// sequence of 0 among them), and ids and a subscription that escape.
func TestAckFrameIsTheJSONFrame(t *testing.T) {
	for _, tc := range []struct {
		name string
		sub  string
		acks []pendingAck
	}{
		{"one", "sub_17", []pendingAck{{id: "msg_9lapyu5l2karsczan619", seq: 42}}},
		{"one without a sequence", "sub_17", []pendingAck{{id: "msg_1"}}},
		{"several", "sub_17", []pendingAck{{id: "msg_a", seq: 43}, {id: "msg_b"}, {id: "msg_c", seq: 1<<64 - 1}}},
		{"escaped", "sub_<\"\\\u2028é>", []pendingAck{{id: "m<&>\"\\\n\u2029\x7f\xff", seq: 7}, {id: "", seq: 8}}},
		{"escaped alone", "s&", []pendingAck{{id: "<script>", seq: 9}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Frame{Op: OpAck, Sub: tc.sub}
			if len(tc.acks) == 1 {
				f.MessageID, f.Sequence = tc.acks[0].id, tc.acks[0].seq
			} else {
				for _, a := range tc.acks {
					f.MessageIDs = append(f.MessageIDs, a.id)
					f.Sequences = append(f.Sequences, a.seq)
				}
			}
			want := string(jsonFrame(f)(nil, "7"))
			require.Equal(t, want, string(ackFrame(tc.sub, tc.acks)([]byte{}, "7")))
		})
	}
}
