package ws_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestNotPendingNamesTheSequence: an ack frame answering one id at two
// sequences, of which one delivery waits and the other does not, is told
// which one was not taken: notPendingSequences goes in step with
// notPending. A frame that names no sequence (protocol v1) is answered
// as before, without it.
func TestNotPendingNamesTheSequence(t *testing.T) {
	cases := []struct {
		name    string
		frame   string
		ids     []string
		seqs    []uint64
		settled bool // whether job-x at sequence 3 was settled
	}{
		{"OneIDAtTwoSequences", `"messageIds":["job-x","job-x"],"sequences":[1,3]`, []string{"job-x"}, []uint64{1}, true},
		{"TheNewerFirst", `"messageIds":["job-x","job-x"],"sequences":[3,1]`, []string{"job-x"}, []uint64{1}, true},
		{"AndOneWithoutSequence", `"messageIds":["other","job-x","nope"],"sequences":[0,1,0]`, []string{"job-x", "nope"}, []uint64{1, 0}, false},
		{"WithMessageID", `"messageIds":["job-x"],"sequences":[3],"messageId":"job-x","sequence":1`, []string{"job-x"}, []uint64{1}, true},
		{"V1WithoutSequences", `"messageIds":["job-x","other"]`, []string{"job-x"}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			crew, sub := reusedDelivery(t)
			a := crew.ok(ws.OpAck, `,"sub":"`+sub+`",`+c.frame, ws.OpOK)
			require.Equal(t, c.ids, a.NotPending)
			require.Equal(t, c.seqs, a.NotPendingSequences)
			if c.settled {
				crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":3`, pigeon.CodeAckNotAllowed)
			} else {
				crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":3`, ws.OpOK)
			}
		})
	}
}
