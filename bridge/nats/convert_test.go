package natsbridge

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon"
)

var convertRoute = Route{Name: "in", Direction: In, Subject: "orders.events", NATSSubject: "legacy.orders",
	Template: Template{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk"}}

func TestConvert(t *testing.T) {
	tests := []struct {
		name    string
		mode    Payload
		payload string
		id      string
		want    pigeon.Message // compared field by field below
		hops    uint32         // the depth the envelope carried
		code    pigeon.Code    // a refusal
	}{
		{name: "plain object under the template", payload: `{"orderId":"o-1"}`, id: "nats-S-1",
			want: pigeon.Message{ID: "nats-S-1", Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`{"orderId":"o-1"}`)}},
		{name: "plain array", payload: `[1,2]`, id: "x",
			want: pigeon.Message{ID: "x", Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`[1,2]`)}},
		{name: "object with type but no data is data", payload: `{"type":"t","subject":"s"}`,
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`{"type":"t","subject":"s"}`)}},
		{name: "empty payload", payload: "",
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk"}},
		{name: "envelope by specversion", payload: `{"specversion":"1.0","id":"e-1","type":"order.paid","intent":"order_event","data":{"a":1}}`,
			want: pigeon.Message{SpecVersion: "1.0", ID: "e-1", Type: "order.paid", Intent: "order_event", Data: []byte(`{"a":1}`)}},
		{name: "envelope by type and data, its id replaced", payload: `{"type":"order.paid","intent":"order_event","data":{}}`, id: "nats-S-9",
			want: pigeon.Message{ID: "nats-S-9", Type: "order.paid", Intent: "order_event", Data: []byte(`{}`)}},
		{name: "the route's subject wins; source and broker fields cleared",
			payload: `{"specversion":"1.0","type":"t","intent":"i","subject":"payments.authorize","source":"spiffe://evil","sequence":7,"contractId":"c","acceptedAt":"x","data":{}}`,
			want:    pigeon.Message{SpecVersion: "1.0", Type: "t", Intent: "i", Data: []byte(`{}`)}},
		{name: "every broker-set field cleared, hops carried apart",
			payload: `{"specversion":"1.0","type":"t","intent":"i","sequence":7,"contractId":"c","subjectId":"s","schemaId":"x","acceptedAt":"x","hops":3,"data":{}}`,
			want:    pigeon.Message{SpecVersion: "1.0", Type: "t", Intent: "i", Data: []byte(`{}`)}, hops: 3},
		{name: "the largest hops an envelope holds", payload: `{"specversion":"1.0","type":"t","hops":4294967295,"data":{}}`,
			want: pigeon.Message{SpecVersion: "1.0", Type: "t", Data: []byte(`{}`)}, hops: 1<<32 - 1},
		{name: "an envelope hops beyond 2^32-1", payload: `{"specversion":"1.0","type":"t","hops":4294967296,"data":{}}`, code: pigeon.CodeEnvelopeInvalid},
		{name: "an envelope hops that is a fraction", payload: `{"specversion":"1.0","type":"t","hops":1.5,"data":{}}`, code: pigeon.CodeEnvelopeInvalid},
		{name: "data mode carries no hops", mode: PayloadData, payload: `{"specversion":"1.0","type":"t","hops":3}`,
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`{"specversion":"1.0","type":"t","hops":3}`)}},
		{name: "an envelope hops that is not an integer of 0 to 2^32-1", payload: `{"specversion":"1.0","type":"t","hops":-1,"data":{}}`, code: pigeon.CodeEnvelopeInvalid},
		{name: "data mode keeps an envelope as data", mode: PayloadData, payload: `{"specversion":"1.0","type":"t"}`,
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`{"specversion":"1.0","type":"t"}`)}},
		{name: "envelope mode refuses data", mode: PayloadEnvelope, payload: `[1]`, code: pigeon.CodeEnvelopeInvalid},
		{name: "envelope mode refuses empty", mode: PayloadEnvelope, payload: ``, code: pigeon.CodeEnvelopeInvalid},
		{name: "duplicate keys in data", payload: `{"a":1,"a":2}`, code: pigeon.CodeDuplicateKey},
		{name: "duplicate keys in an envelope", payload: `{"specversion":"1.0","type":"a","type":"b"}`, code: pigeon.CodeDuplicateKey},
		{name: "invalid UTF-8", payload: "{\"a\":\"\xff\"}", code: pigeon.CodeInvalidUTF8},
		{name: "lone surrogate", payload: `{"a":"\ud800"}`, code: pigeon.CodeInvalidUTF8},
		{name: "not JSON", payload: `hello`, code: pigeon.CodeEnvelopeInvalid},
		{name: "data nesting as deep as the broker reads", mode: PayloadData, payload: strings.Repeat("[", 64) + strings.Repeat("]", 64),
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(strings.Repeat("[", 64) + strings.Repeat("]", 64))}},
		{name: "data nesting deeper than the broker reads", payload: strings.Repeat("[", 65) + strings.Repeat("]", 65), code: pigeon.CodeEnvelopeInvalid},
		{name: "envelope data nesting deeper than the broker reads", payload: `{"type":"t","data":{"a":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}}`, code: pigeon.CodeEnvelopeInvalid},
		{name: "brackets in strings do not nest", payload: `{"a":"` + strings.Repeat("[{", 80) + `\"]"}`,
			want: pigeon.Message{Type: "order.created", Intent: "order_event", Classification: "internal", Region: "uk", Data: []byte(`{"a":"` + strings.Repeat("[{", 80) + `\"]"}`)}},
		{name: "an envelope field of the wrong type", payload: `{"specversion":"1.0","type":1,"data":{}}`, code: pigeon.CodeEnvelopeInvalid},
		{name: "an envelope member differing in case", payload: `{"specversion":"1.0","Type":"x","data":{}}`, code: pigeon.CodeEnvelopeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := convertRoute
			r.Payload = tt.mode
			m, hops, err := convert(&r, []byte(tt.payload), tt.id)
			if tt.code != "" {
				require.Error(t, err)
				require.Equal(t, tt.code, code(t, err))
				if len(tt.payload) > 4 {
					require.NotContains(t, err.Error(), tt.payload[1:], "the error quotes no payload")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.hops, hops, "the depth carried")
			want := tt.want
			want.Subject = r.Subject
			require.Equal(t, string(want.Data), string(m.Data))
			want.Data, m.Data = nil, nil
			require.Equal(t, want, *m)
		})
	}
}

// FuzzConvert: whatever the payload, convert either refuses it with a
// code, or returns a message on the route's subject, with the id asked for,
// no source, and data that is strict JSON, which encodes and decodes back
// to the same message.
func FuzzConvert(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[]`, `"x"`, `1`, ``, `{"specversion":"1.0","type":"t","data":{"x":[1]}}`,
		`{"type":"t","data":null,"subject":"other"}`, `{"a":1,"a":1}`, "\xff", `{"data":"\udc00","type":"t"}`, `{"specversion":"1.0","signature":{"kid":"k"}}`, `{"type":"t","hops":5,"data":{}}`} {
		f.Add([]byte(s), uint8(0), "nats-S-1")
	}
	f.Fuzz(func(t *testing.T, payload []byte, mode uint8, id string) {
		r := convertRoute
		r.Payload = []Payload{PayloadAuto, PayloadEnvelope, PayloadData}[int(mode)%3]
		in := bytes.Clone(payload)
		m, _, err := convert(&r, payload, id)
		require.Equal(t, in, payload, "the payload is not changed")
		if err != nil {
			require.NotEqual(t, pigeon.CodeOK, pigeon.ErrorCode(err))
			require.NotEqual(t, pigeon.CodeInternal, pigeon.ErrorCode(err))
			return
		}
		require.Equal(t, r.Subject, m.Subject)
		require.Empty(t, m.Source)
		require.Zero(t, m.Sequence)
		require.Zero(t, m.Hops)
		if id != "" {
			require.Equal(t, id, m.ID)
		}
		if len(m.Data) > 0 {
			require.NoError(t, pigeon.CheckJSON(m.Data))
		}
		if !utf8.ValidString(m.ID) {
			return // the broker refuses it with INVALID_UTF8 (an id from NATS is not checked here)
		}
		back, err := pigeon.DecodeMessage(m.AppendJSON(nil))
		require.NoError(t, err)
		require.Equal(t, m.Subject, back.Subject)
		require.Equal(t, m.ID, back.ID)
		require.Equal(t, m.Type, back.Type)
	})
}
