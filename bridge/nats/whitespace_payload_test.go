package natsbridge

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A payload of white space alone is no JSON text: it was published as a
// message without data, its bytes dropped silently, where any other
// payload that is not JSON is refused. It is refused ENVELOPE_INVALID in
// every mode; an empty payload is still a message without data.
func TestWhiteSpacePayloadIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name    string
		mode    Payload
		payload string
		code    pigeon.Code // "" when accepted without data
	}{
		{"auto, spaces", PayloadAuto, "   ", pigeon.CodeEnvelopeInvalid},
		{"auto, a newline", PayloadAuto, "\n", pigeon.CodeEnvelopeInvalid},
		{"data, tabs and CRLF", PayloadData, "\t\r\n", pigeon.CodeEnvelopeInvalid},
		{"envelope, spaces", PayloadEnvelope, " ", pigeon.CodeEnvelopeInvalid},
		{"auto, empty", PayloadAuto, "", ""},
		{"data, empty", PayloadData, "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := convertRoute
			r.Payload = tt.mode
			m, _, err := convert(&r, []byte(tt.payload), "x")
			if tt.code == "" {
				require.NoError(t, err)
				require.Empty(t, m.Data)
				return
			}
			require.Nil(t, m)
			require.Equal(t, tt.code, code(t, err))
		})
	}
}
