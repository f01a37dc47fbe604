package pigeon

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSizeHint: the size hint holds the encoding of a message without
// escapes, whatever fields it has, so encoding it never grows its buffer.
func TestSizeHint(t *testing.T) {
	full := &Message{SpecVersion: SpecVersion, ID: "msg_4vor10wpdfk253p08mhm", Type: "payment.authorization.requested",
		Source: "spiffe://merchant-prod/ns/checkout/sa/checkout-api", Subject: "payments.authorize", Time: "2026-11-29T12:00:01.123456789Z",
		Intent: "authorize_payment", IdempotencyKey: "pay-1", Classification: "pci", Region: "uk", Data: json.RawMessage(`{"a":1}`),
		ReplyTo: "r", CorrelationID: "c", Reason: "why", Signature: &Signature{KID: "k", Alg: "ed25519", Sig: strings.Repeat("s", 86)},
		Sequence: 1 << 63, ContractID: "ctr_5b0c", SubjectID: "payments.authorize", SchemaID: "payment.authorization.v1",
		AcceptedAt: "2026-11-29T12:00:01.123456789Z"}
	for _, m := range []*Message{{}, {Data: json.RawMessage(strings.Repeat(" ", 5000))}, full} {
		require.LessOrEqual(t, len(m.AppendJSON(nil)), m.sizeHint(), "%+v", m)
	}
}
