package pigeon_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func TestMessageJSONRoundTrip(t *testing.T) {
	for _, v := range []int{0, pigeon.SignatureV2, 1, 3} {
		m := demo.Payment("o-1")
		m.ID, m.Source, m.Time, m.SpecVersion = "msg_1", demo.Checkout, "2026-11-29T12:00:00.000Z", "1.0"
		m.ReplyTo, m.CorrelationID, m.Reason = "inbox", "c-1", "why <not> & \"quotes\"\n\u2028"
		m.Signature = &pigeon.Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln", V: v}
		m.Sequence, m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt = 7, "ctr_1", "payments.authorize", "payment.authorization.v1", "2026-11-29T12:00:00.001Z"
		m.Hops = uint32(v + 1)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		std, err := json.Marshal(struct{ *stdMessage }{(*stdMessage)(m)})
		require.NoError(t, err)
		require.JSONEq(t, string(std), string(b), "AppendJSON encodes like encoding/json")
		require.Equal(t, v != 0, strings.Contains(string(b), `"v":`), "v is written when set: %s", b)
		require.Contains(t, string(b), `,"hops":`+strconv.Itoa(v+1)+`}`, "hops is written last: %s", b)
		back, err := pigeon.DecodeMessage(b)
		require.NoError(t, err)
		require.Equal(t, m, back)
	}
}

// stdMessage has Message's fields without its MarshalJSON.
type stdMessage pigeon.Message

func TestDecodeMessageErrors(t *testing.T) {
	for _, in := range []string{``, `[]`, `"x"`, `{"id":1}`, `{"data":`, `{"sequence":"x"}`, `null`} {
		_, err := pigeon.DecodeMessage([]byte(in))
		requireCode(t, err, pigeon.CodeEnvelopeInvalid)
	}
}

// TestDecodeMessageNamesAreCaseSensitive checks that an envelope member
// spelled in another case than its field is refused: encoding/json would
// take "Data" for the data, a JavaScript or Python reader would not.
func TestDecodeMessageNamesAreCaseSensitive(t *testing.T) {
	for _, tc := range []struct{ in, member string }{
		{`{"type":"t","Data":{"a":1}}`, `"/Data" differs from "data"`},
		{`{"data":{"a":1},"DATA":{"a":2}}`, `"/DATA" differs from "data"`},
		{`{"ID":"msg_1"}`, `"/ID" differs from "id"`},
		{`{"idempotencykey":"k"}`, `"/idempotencykey" differs from "idempotencyKey"`},
		{`{"signature":{"kid":"k","SIG":"s"}}`, `"/signature/SIG" differs from "sig"`},
	} {
		_, err := pigeon.DecodeMessage([]byte(tc.in))
		pe := requireCode(t, err, pigeon.CodeEnvelopeInvalid)
		require.Contains(t, pe.Message, tc.member)
	}
	m, err := pigeon.DecodeMessage([]byte(`{"type":"t","data":{"Data":1,"ID":"x"}}`))
	require.NoError(t, err, "names inside data are data")
	require.JSONEq(t, `{"Data":1,"ID":"x"}`, string(m.Data))
}

func FuzzDecodeMessage(f *testing.F) {
	seed, _ := json.Marshal(demo.Payment("o-1"))
	f.Add(seed)
	f.Add([]byte(`{"subject":"x","data":[1,2,{"a":null}],"signature":{"kid":"k"}}`))
	f.Add([]byte(`{"id":"\u0000","time":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"subject":"x","hops":7,"sequence":2}`))
	f.Add([]byte(`{"":"", ""`)) // a repeated name before the text ends: DUPLICATE_KEY
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := pigeon.DecodeMessage(in)
		if err != nil {
			// The codes DecodeMessage documents.
			require.Contains(t, []pigeon.Code{pigeon.CodeEnvelopeInvalid, pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8}, pigeon.ErrorCode(err), "%q: %v", in, err)
			return
		}
		// What decodes re-encodes to an equal envelope.
		b, err := json.Marshal(m)
		if err != nil {
			return // data that is not valid JSON on its own (never from a decode)
		}
		back, err := pigeon.DecodeMessage(b)
		require.NoError(t, err)
		require.Equal(t, m.ID, back.ID)
		require.Equal(t, m.Subject, back.Subject)
		require.Equal(t, m.Sequence, back.Sequence)
		require.Equal(t, m.Hops, back.Hops)
		if len(m.Data) > 0 && string(m.Data) != "null" {
			require.JSONEq(t, string(m.Data), string(back.Data))
		}
	})
}
