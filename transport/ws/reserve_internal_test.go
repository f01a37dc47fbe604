package ws

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestDeliveryFramesHoldTheirBytes: a deliver or deliver_batch frame holds
// at least its own size of the write budgets, whatever its envelope. The
// reservation was the data plus 1 KiB, while envelope fields a publisher
// sets (up to 256 bytes each, 512 for reason) are written escaped, and an
// HTML-sensitive '<' is six bytes on the wire: a message of two bytes of
// data took 14 KiB a delivery while holding 1 KiB of the budgets, so a
// subscriber that stopped reading made the server hold 14 times its write
// budgets (per connection, up to its 256 frames of deliver_batch, and the
// server's across connections).
func TestDeliveryFramesHoldTheirBytes(t *testing.T) {
	lt := strings.Repeat("<", pigeon.MaxEnvelopeField)
	m := publishedChat(t, &pigeon.Message{ID: "m" + lt[1:], Type: "chat", Subject: "chat.messages", Intent: "chat",
		IdempotencyKey: lt, ReplyTo: lt, CorrelationID: lt, Reason: strings.Repeat("<", pigeon.MaxReason),
		Signature: &pigeon.Signature{KID: lt, Alg: lt, Sig: lt}, Data: []byte(`{}`)}) // the broker accepts such a message

	for _, tc := range []struct {
		name  string
		batch bool
	}{
		{"deliver frame", false},
		{"deliver_batch frame", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss, c := readySub(t, m.e, tc.batch, true)
			for range 10 {
				ss.handle(context.Background(), &pigeon.Delivery{Subject: "chat.messages", Attempt: 1, Message: m.Message}, func(error) {})
			}
			ss.flush()
			var held, size int64
			for len(c.out) > 0 {
				f := <-c.out
				require.GreaterOrEqual(t, f.n, int64(len(f.b)), "a frame of %d bytes holds %d of the budgets", len(f.b), f.n)
				held, size = held+f.n, size+int64(len(f.b))
			}
			require.Positive(t, size)
			require.GreaterOrEqual(t, c.budget.inUse(), size)
			require.GreaterOrEqual(t, c.srv.budget.inUse(), size)
			c.unreserve(held)
		})
	}
}
