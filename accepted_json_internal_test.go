package pigeon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAcceptedJSONIsAppendJSON: the encoding made from an accepted
// message's stored envelope (acceptedJSON) is byte for byte what
// Message.AppendJSON encodes for the message with its sequence and
// acceptance time, for every shape of envelope; a stored envelope that
// does not end as the message's would is refused (nil), never spliced.
func TestAcceptedJSONIsAppendJSON(t *testing.T) {
	base := func() Message {
		return Message{SpecVersion: SpecVersion, ID: "msg_1", Type: "payment", Source: "spiffe://p", Subject: "payments.events",
			Time: "2026-12-06T08:00:00.000Z", Intent: "authorize", Classification: "pci", Region: "uk",
			Data: json.RawMessage(`{"amount":1}`), ContractID: "ctr_1", SubjectID: "payments.events", SchemaID: "payment.v1"}
	}
	for _, tc := range []struct {
		name   string
		change func(m *Message)
	}{
		{"plain", func(*Message) {}},
		{"idempotency key", func(m *Message) { m.IdempotencyKey = "k-1" }},
		{"no data", func(m *Message) { m.Data = nil }},
		{"no schema", func(m *Message) { m.SchemaID = "" }},
		{"no ids", func(m *Message) { m.ContractID, m.SubjectID, m.SchemaID = "", "", "" }},
		{"hops", func(m *Message) { m.Hops = 3 }},
		{"hops and no ids", func(m *Message) { m.Hops, m.ContractID, m.SubjectID, m.SchemaID = 1, "", "", "" }},
		{"signature", func(m *Message) { m.Signature = &Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln"} }},
		{"signature v2", func(m *Message) { m.Signature = &Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln", V: SignatureV2} }},
		{"request", func(m *Message) { m.ReplyTo, m.CorrelationID = "replies", "msg_0" }},
		{"reason", func(m *Message) { m.Reason = "released" }},
		{"escapes", func(m *Message) {
			m.ContractID, m.SchemaID, m.Type = "ctr_\"q\"\\", "s\u2028<>&\u00e9", "t\x7f\ttab"
			m.Data = json.RawMessage(`{"text":"\"},\"sequence\":1}"}`)
		}},
		{"member names in data", func(m *Message) {
			m.Data = json.RawMessage(`{"contractId":"ctr_1","subjectId":"payments.events","hops":2}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored := base()
			tc.change(&stored)
			body := stored.AppendJSON(nil)
			accepted := stored
			accepted.Sequence, accepted.AcceptedAt = 42, "2026-12-06T08:00:00.001Z"
			require.Equal(t, string(accepted.AppendJSON(nil)), string(acceptedJSON(body, &accepted)))

			other := accepted
			other.ContractID += "x"
			require.Nil(t, acceptedJSON(body, &other), "a stored envelope of other ids is not spliced")
			other = accepted
			other.Hops++
			require.Nil(t, acceptedJSON(body, &other), "a stored envelope of another depth is not spliced")
		})
	}
}

// BenchmarkAcceptedJSON compares the encoding made from the stored
// envelope (acceptedJSON) with encoding the message again (AppendJSON
// into a fresh buffer, as decoded.json does), for the bench/compare
// payment message.
func BenchmarkAcceptedJSON(b *testing.B) {
	m := Message{SpecVersion: SpecVersion, ID: "msg_0123456789abcdefghij", Type: "payment.authorization.requested", Source: "spiffe://pigeon.local/checkout",
		Subject: "payments.events", Time: "2026-12-06T08:00:00.000Z", Intent: "authorize_payment", IdempotencyKey: "k-123456",
		Classification: "pci", Region: "uk", Data: json.RawMessage(`{"merchantId":"m-100","orderId":"o-123456","amount":4999,"currency":"GBP","paymentToken":"tok_visa_4242"}`),
		ContractID: "ctr_0123456789abcdef", SubjectID: "payments.events", SchemaID: "payment.authorization.v1"}
	body := m.AppendJSON(nil)
	m.Sequence, m.AcceptedAt = 123456, "2026-12-06T08:00:00.001Z"
	b.Run("from stored", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if acceptedJSON(body, &m) == nil {
				b.Fatal("not spliced")
			}
		}
	})
	b.Run("encoded again", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = m.AppendJSON(make([]byte, 0, m.sizeHint()))
		}
	})
}
