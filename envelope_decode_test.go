package pigeon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// envelopeSeeds are envelopes the broker writes and clients send, and
// near misses that encoding/json reads its own way.
var envelopeSeeds = []string{
	`{}`,
	`{"specversion":"1.0","id":"m1","type":"t","source":"s","subject":"a.b","time":"2026-01-01T00:00:00Z","intent":"i","classification":"internal","region":"eu","data":{"a":1}}`,
	`{"id":"m\u00e9\n","data":[1,2,{"x":null}],"sequence":42,"signature":{"kid":"k","alg":"ed25519","sig":"AAAA"},"acceptedAt":"x"}`,
	`{"ID":"upper","Type":"t"}`,
	`{"id":null,"data":null,"signature":null}`,
	`{"id":"a","id":"b"}`,
	`{"sequence":1.5}`,
	`{"sequence":-1}`,
	`{"sequence":18446744073709551616}`,
	`{"signature":{"kid":"k","extra":1}}`,
	`{"signature":{"kid":5}}`,
	`{"id":5}`,
	`{"unknown":"x","id":"y"}`,
	"{\"id\":\"\xff\"}",
	`{"id":"\ud800"}`,
	`[1]`,
	`{"id":"a"} x`,
	` {"data" : { "k" : "v" } , "id" : "z" } `,
	`{"data":"\u0000"}`,
}

func TestUnmarshalEnvelopeAgreesWithEncodingJSON(t *testing.T) {
	for _, in := range envelopeSeeds {
		t.Run(in, func(t *testing.T) { agreeOnEnvelope(t, []byte(in)) })
	}
}

func FuzzUnmarshalEnvelope(f *testing.F) {
	for _, in := range envelopeSeeds {
		f.Add([]byte(in))
	}
	m := Message{SpecVersion: "1.0", ID: "x", Data: json.RawMessage(`{"k":[1,"é"]}`), Signature: &Signature{KID: "k"}, Sequence: 9}
	f.Add(m.AppendJSON(nil))
	f.Fuzz(agreeOnEnvelope)
}

// agreeOnEnvelope holds unmarshalEnvelope to json.Unmarshal: the same
// refusal, or the same message.
func agreeOnEnvelope(t *testing.T, in []byte) {
	var fast, slow Message
	errFast := unmarshalEnvelope(in, &fast)
	errSlow := json.Unmarshal(in, &slow)
	require.Equal(t, errSlow == nil, errFast == nil, "fast %v, encoding/json %v", errFast, errSlow)
	if errSlow == nil {
		require.Equal(t, slow, fast)
	}
}

func BenchmarkUnmarshalEnvelope(b *testing.B) {
	m := Message{SpecVersion: "1.0", ID: "msg_0123456789abcdef", Type: "payment.created", Source: "svc", Subject: "payments.created",
		Time: "2026-01-01T00:00:00Z", Intent: "notify", Classification: "internal", Region: "eu", Sequence: 77, AcceptedAt: "2026-01-01T00:00:00.000Z",
		Data: json.RawMessage(`{"paymentId":"p_1","amount":1250,"currency":"EUR","customer":{"id":"c_9","country":"DE"},"card":{"last4":"4242","brand":"visa"}}`)}
	body := m.AppendJSON(nil)
	b.Run("pigeon", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out Message
			if err := unmarshalEnvelope(body, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var out Message
			if err := json.Unmarshal(body, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
