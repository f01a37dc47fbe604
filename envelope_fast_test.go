package pigeon

import (
	"encoding/json"
	"strings"
	"testing"

	"pigeon/internal/datapath"
	"pigeon/internal/jsontext"

	"github.com/stretchr/testify/require"
)

// payment is the envelope a publisher sends (BenchmarkHTTPPublish's).
const payment = `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
	`"idempotencyKey":"k002n9c","classification":"pci","data":{"merchantId":"m-100","orderId":"o-1","amount":42.5,` +
	`"currency":"GBP","paymentToken":"tok_9f8e7d6c"}}`

// envelopeCases are texts on both sides of every rule DecodeMessage and
// pigeon.DecodeMessage must agree on; fast says whether the one-pass
// decoder reads the text itself rather than handing it on.
var envelopeCases = []struct {
	name string
	in   string
	fast bool
}{
	{"payment", payment, true},
	{"empty object", `{}`, true},
	{"whitespace around", " \n\t{ \"id\" : \"a\" , \"data\" : [ 1 , 2 ] }\r\n ", true},
	{"every member", `{"specversion":"1.0","id":"msg_1","type":"t","source":"s","subject":"a.b","time":"2026-01-01T00:00:00.000Z",` +
		`"intent":"i","idempotencyKey":"k","classification":"pci","region":"uk","data":{"a":[1,{"b":null}]},"replyTo":"r",` +
		`"correlationId":"c","reason":"why","signature":{"kid":"k1","alg":"ed25519","sig":"AAAA"},"sequence":18446744073709551615,` +
		`"contractId":"ctr","subjectId":"sid","schemaId":"sch","acceptedAt":"2026-01-01T00:00:00.000Z","hops":4294967295}`, true},
	{"nulls", `{"id":null,"signature":null,"sequence":null,"hops":null}`, true},
	{"hops", `{"hops":3,"id":"a"}`, true},
	{"hops 0", `{"hops":0}`, true},
	{"null data", `{"data":null}`, false},
	{"data string", `{"data":"x"}`, true},
	{"data number", `{"data":-1.5e3}`, true},
	{"data true", `{"data":true}`, true},
	{"data with spaces", `{"data":{ "a" : "b c" }}`, true},
	{"data holds escapes", `{"data":{"a\"b":"\u00e9\n\\"}}`, true},
	{"empty signature", `{"signature":{}}`, true},
	{"signature of the second form", `{"signature":{"kid":"k1","alg":"ed25519","sig":"AAAA","v":2}}`, true},
	{"signature v first", `{"signature":{"v" : 2 ,"kid":"k1"}}`, true},
	{"signature v alone", `{"signature":{"v":2}}`, true},
	{"signature v 1", `{"signature":{"kid":"k1","v":1}}`, false},
	{"signature v 0", `{"signature":{"v":0}}`, false},
	{"signature v 20", `{"signature":{"v":20}}`, false},
	{"signature v 2.0", `{"signature":{"v":2.0}}`, false},
	{"signature v 2e0", `{"signature":{"v":2e0}}`, false},
	{"signature v -2", `{"signature":{"v":-2}}`, false},
	{"signature v string", `{"signature":{"v":"2"}}`, false},
	{"signature v null", `{"signature":{"v":null}}`, false},
	{"signature v twice", `{"signature":{"v":2,"v":2}}`, false},
	{"signature v in another case", `{"signature":{"V":2}}`, false},
	{"signature v overflow", `{"signature":{"v":99999999999999999999}}`, false},
	{"signature null member", `{"signature":{"kid":null,"alg":"a"}}`, true},
	{"unknown members ignored", `{"foo":{"x":[1,2,{"y":"z"}]},"bar":"baz","id":"a"}`, true},
	{"non-ASCII value", `{"reason":"héllo ☃ 😀"}`, true},
	{"empty strings", `{"id":"","type":""}`, true},

	// Handed on, and decided the same.
	{"escape in a string", `{"id":"a\u0062"}`, false},
	{"escaped name", `{"\u0069d":"a"}`, false},
	{"name in another case", `{"ID":"a"}`, false},
	{"names in two cases", `{"id":"a","ID":"b"}`, false},
	{"Kelvin sign folds", `{"` + "\u212a" + `ind":"x"}`, false},
	{"long s folds", `{"` + "\u017f" + `ubject":"x"}`, false},
	{"unknown in another case of a member", `{"DATA":{}}`, false},
	{"signature member in another case", `{"signature":{"KID":"a"}}`, false},
	{"signature unknown member", `{"signature":{"x":"a"}}`, false},
	{"signature not an object", `{"signature":"x"}`, false},
	{"signature array", `{"signature":[]}`, false},
	{"sequence negative", `{"sequence":-1}`, false},
	{"sequence fraction", `{"sequence":1.5}`, false},
	{"sequence exponent", `{"sequence":1e3}`, false},
	{"sequence overflow", `{"sequence":18446744073709551616}`, false},
	{"sequence string", `{"sequence":"1"}`, false},
	{"hops negative", `{"hops":-1}`, false},
	{"hops minus zero", `{"hops":-0}`, false},
	{"hops fraction", `{"hops":1.5}`, false},
	{"hops 1.0", `{"hops":1.0}`, false},
	{"hops exponent", `{"hops":1e1}`, false},
	{"hops overflow", `{"hops":4294967296}`, false},
	{"hops string", `{"hops":"1"}`, false},
	{"hops true", `{"hops":true}`, false},
	{"hops twice", `{"hops":1,"hops":2}`, false},
	{"hops in another case", `{"Hops":1}`, false},
	{"string field number", `{"id":1}`, false},
	{"string field bool", `{"type":true}`, false},
	{"string field object", `{"subject":{}}`, false},
	{"string field array", `{"subject":["a"]}`, false},
	{"two type errors", `{"id":1,"type":2}`, false},
	{"duplicate member", `{"id":"a","id":"b"}`, false},
	{"duplicate unknown", `{"x":1,"x":2}`, false},
	{"duplicate in data", `{"data":{"a":1,"a":2}}`, false},
	{"duplicate deep in unknown", `{"x":[{"a":1,"a":2}]}`, false},
	{"duplicate in data after escape", `{"data":{"a":1,"\u0061":2}}`, false},
	{"invalid UTF-8 in value", "{\"id\":\"a\xffb\"}", false},
	{"invalid UTF-8 in name", "{\"i\xffd\":\"a\"}", false},
	{"invalid UTF-8 in data", "{\"data\":{\"a\":\"\xc3\"}}", false},
	{"lone surrogate in data", `{"data":{"a":"\ud800"}}`, false},
	{"lone surrogate in value", `{"id":"\udc00"}`, false},
	{"not an object", `[1]`, false},
	{"string", `"x"`, false},
	{"empty", ``, false},
	{"spaces", `   `, false},
	{"unterminated", `{"id":"a"`, false},
	{"trailing comma", `{"id":"a",}`, false},
	{"trailing text", `{"id":"a"} x`, false},
	{"two objects", `{}{}`, false},
	{"missing colon", `{"id" "a"}`, false},
	{"bad literal in data", `{"data":tru}`, false},
	{"bad number in data", `{"data":01}`, false},
	{"control character", "{\"id\":\"a\nb\"}", false},
	{"unbalanced data", `{"data":{"a":[1}]}`, false},
	{"bracket in a data string", `{"data":{"a":"}"}}`, true},
	{"deep data", `{"data":` + strings.Repeat(`[`, 71) + strings.Repeat(`]`, 71) + `}`, true},
	{"too deep data", `{"data":` + strings.Repeat(`[`, 72) + strings.Repeat(`]`, 72) + `}`, false},
	{"many unknown members", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9}`, false},
}

func TestDecodeMessageAgrees(t *testing.T) {
	for _, tc := range envelopeCases {
		t.Run(tc.name, func(t *testing.T) {
			requireSameDecoding(t, []byte(tc.in))
			require.Equal(t, tc.fast, decodeEnvelope([]byte(tc.in)) != nil, "read in one pass")
		})
	}
}

// requireSameDecoding holds DecodeMessage (one pass first) to
// decodeMessageSlow (jsontext.Validate and encoding/json) on in.
func requireSameDecoding(t *testing.T, in []byte) {
	t.Helper()
	want, wantErr := decodeMessageSlow(in)
	got, err := DecodeMessage(in)
	if wantErr != nil {
		require.Error(t, err, "accepted %q, which the strict path refuses: %v", in, wantErr)
		require.Equal(t, ErrorCode(wantErr), ErrorCode(err), "%q", in)
		require.Equal(t, wantErr.Error(), err.Error(), "%q", in)
		return
	}
	require.NoError(t, err, "%q", in)
	require.Equal(t, want, got, "%q", in)
	requireSamePredecoded(t, in)
}

// requireSamePredecoded holds the one-pass decoder that also decodes the
// data (the HTTP server's) to the one that does not: it reads the same
// texts, into the same message, and the data it attaches is the
// message's Data, decoded as the engine decodes it.
func requireSamePredecoded(t *testing.T, in []byte) {
	t.Helper()
	plain, pre := decodeEnvelope(in), decodeEnvelopeData(in, true)
	require.Equal(t, plain == nil, pre == nil, "%q: read in one pass with the data decoded or not", in)
	if pre == nil {
		return
	}
	require.Nil(t, plain.pre)
	if p := pre.pre; p != nil {
		require.True(t, sameText(p.Text, pre.Data), "%q: Data is the decoder's copy", in)
		var names datapath.Names
		doc, err := jsontext.DecodeDocument(plain.Data, MaxJSONDepth, &names)
		require.NoError(t, err, "%q", in)
		require.NotNil(t, p.Arena, "%q: decoded in the flat form", in)
		require.Equal(t, doc.Value, jsontext.Tree(p.Value), "%q", in)
		require.Equal(t, doc.Exact, p.Exact, "%q", in)
		require.Equal(t, names, p.Names, "%q", in)
		pre.pre = nil
	} else if len(plain.Data) > 0 && string(plain.Data) != "null" {
		_, err := jsontext.DecodeDocument(plain.Data, MaxJSONDepth, nil)
		require.Error(t, err, "%q: data the engine decodes was not decoded with the envelope", in)
	}
	require.Equal(t, plain, pre, "%q", in)
}

// FuzzDecodeMessageOnePass holds the one-pass decoder to the strict path: the
// same message or the same refusal for any input.
func FuzzDecodeMessageOnePass(f *testing.F) {
	for _, tc := range envelopeCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		requireSameDecoding(t, in)
	})
}

func TestDecodeMessageCopies(t *testing.T) {
	in := []byte(payment)
	m, err := DecodeMessage(in)
	require.NoError(t, err)
	want := *m
	want.Data = append(json.RawMessage(nil), m.Data...)
	for i := range in {
		in[i] = 'x'
	}
	require.Equal(t, &want, m, "the message shares no memory with the input")
}

func BenchmarkDecodeMessage(b *testing.B) {
	in := []byte(payment)
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeMessage(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeMessageSlow(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
