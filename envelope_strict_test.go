package pigeon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeMessageRefusesNonJSONSpace: white space JSON does not allow
// (\v, \f, U+0085, U+00A0, U+3000) around an envelope makes the text
// something other than JSON; CheckJSON and every other reader refuse it,
// so DecodeMessage (the HTTP publish body, a program's publish) must too.
func TestDecodeMessageRefusesNonJSONSpace(t *testing.T) {
	for _, in := range []string{
		"\v{\"id\":\"a\"}", "\f{}", "{}\f", "\u0085{}", "{\"id\":\"a\"}\u00a0", "\u3000{}", "\u2028{}",
	} {
		require.Error(t, CheckJSON([]byte(in)), "%q", in)
		_, err := DecodeMessage([]byte(in))
		require.Error(t, err, "%q is not JSON, and was decoded", in)
		require.Equal(t, CodeEnvelopeInvalid, ErrorCode(err), "%q", in)
		requireSameDecoding(t, []byte(in))
	}
	for _, in := range []string{" \t\r\n{} \t\r\n", "\n{\"id\":\"a\"}\n"} {
		_, err := DecodeMessage([]byte(in))
		require.NoError(t, err, "%q", in)
	}
}

// FuzzDecodeMessageIsJSON holds DecodeMessage to the JSON every other
// reader sees: it accepts only text CheckJSON accepts, and a message it
// decodes reads back, from the encoding receivers get (AppendJSON), as
// the same message.
func FuzzDecodeMessageIsJSON(f *testing.F) {
	for _, tc := range envelopeCases {
		f.Add([]byte(tc.in))
	}
	for _, in := range envelopeSeeds {
		f.Add([]byte(in))
	}
	for _, in := range []string{"\v{}", "{}\u00a0", "\u0085{\"id\":\"a\"}", ` {"data":[1,{"a":"\u00e9"}],"id":"x"} `} {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessage(in)
		if err != nil {
			return
		}
		require.NoError(t, CheckJSON(in), "DecodeMessage accepted %q", in)
		require.True(t, json.Valid(in), "DecodeMessage accepted %q", in)
		if !m.ValidText() {
			return // the envelope gate refuses it
		}
		enc := m.AppendJSON(nil)
		back, err := DecodeMessage(enc)
		require.NoError(t, err, "%q encodes as %q", in, enc)
		if len(m.Data) == 0 {
			m.Data = json.RawMessage("{}")
		}
		require.Equal(t, m, back, "%q encodes as %q", in, enc)
	})
}
