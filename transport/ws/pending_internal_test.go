package ws

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// Publishes queued while the writer is busy leave as one frame, bounded in
// messages and in bytes; a lone publish stays a v1 publish frame.
func TestPublishQueueCoalesces(t *testing.T) {
	small := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"text":"hi"}`)}
	big := small.Clone()
	big.Data = json.RawMessage(`{"text":"` + strings.Repeat("x", 3000) + `"}`)
	tests := []struct {
		name     string
		maxFrame int64
		msgs     []*pigeon.Message
		frames   []int // messages per frame, in order
	}{
		{"lone", 0, []*pigeon.Message{small}, []int{1}},
		{"coalesced", 0, repeat(small, 5), []int{5}},
		{"count bound", 0, repeat(small, MaxPublishBatch+3), []int{MaxPublishBatch, 3}},
		{"byte bound", 8192, append(repeat(small, 2), repeat(big, 3)...), []int{3, 1, 1}},
		{"alone past the bound", 2048, []*pigeon.Message{small, big, small}, []int{1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc := &clientConn{pq: newPubQueue(), pending: map[string]*pendingCall{}}
			cc.pq.fitFrame(tc.maxFrame)
			slots := make(chan struct{}, len(tc.msgs))
			for _, m := range tc.msgs {
				slots <- struct{}{}
				require.NoError(t, cc.pq.push(m, &PendingPublish{done: make(chan struct{}), slots: slots}))
			}
			var got []int
			for b := cc.nextPublishFrame(); b != nil; b = cc.nextPublishFrame() {
				f, err := DecodeFrame(b)
				require.NoError(t, err, "%s", b)
				if tc.maxFrame > 0 && len(f.Batch) > 1 {
					require.LessOrEqual(t, int64(len(b)), tc.maxFrame)
				}
				switch f.Op {
				case OpPublish:
					require.NotNil(t, f.Message)
					got = append(got, 1)
				case OpPublishBatch:
					require.Greater(t, len(f.Batch), 1)
					got = append(got, len(f.Batch))
				default:
					t.Fatalf("frame %s", b)
				}
			}
			require.Equal(t, tc.frames, got)
			require.Len(t, cc.pending, len(tc.frames), "every frame's answer is routed")
		})
	}
}

func repeat(m *pigeon.Message, n int) []*pigeon.Message {
	out := make([]*pigeon.Message, n)
	for i := range out {
		out[i] = m
	}
	return out
}

// A decisions answer that does not match the batch fails every publish of
// it instead of leaving any unresolved.
func TestResolvePublishesMismatch(t *testing.T) {
	slots := make(chan struct{}, 2)
	var items []*PendingPublish
	for range 2 {
		slots <- struct{}{}
		items = append(items, &PendingPublish{done: make(chan struct{}), slots: slots})
	}
	resolvePublishes(items, &Frame{Op: OpDecisions, Results: []BatchResult{{Status: "accepted"}}})
	for _, p := range items {
		_, err := p.Result()
		require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err))
	}
	require.Empty(t, slots)
}
