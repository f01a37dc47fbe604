package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A JSON number beyond 2^53 decodes to the nearest double, so the digits
// the tokenized gate judged were not those the store keeps and a receiver
// that reads numbers exactly (json.Number, Jackson, Python) gets: the
// 19-digit card number 6217000000000000004 decodes to 6217000000000000000,
// which fails Luhn, and passed. A number is a card number when any integer
// its text could spell (any that rounds to the decoded double) is one.
func TestTokenizedNumbersBeyondDoublePrecision(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken"})
	tests := []struct {
		data   string
		denied bool
	}{
		// Luhn-valid card numbers of 17 to 19 digits, as numbers.
		{`{"paymentToken":6217000000000000004}`, true},
		{`{"paymentToken":4000000000000000006}`, true},
		{`{"paymentToken":4111111111111111110}`, true},
		{`{"paymentToken":41111111111111113}`, true},
		{`{"paymentToken":-6217000000000000004}`, true},
		{`{"paymentToken":[1,6217000000000000004]}`, true},
		// Other spellings of the same values.
		{`{"paymentToken":6.217000000000000004e18}`, true},
		{`{"paymentToken":6217000000000000004.0}`, true},
		// Spellings of values within double precision are judged as before.
		{`{"paymentToken":4.111111111111111e15}`, true},
		{`{"paymentToken":4111111111111111.0}`, true},
		{`{"paymentToken":4111111111111112}`, false},
		{`{"paymentToken":9007199254740991}`, false}, // 2^53-1: exact, not Luhn-valid
		// 9999999999999999999, 19 digits, decodes to 1e19 too, and so do
		// Luhn-valid numbers just below it: 1e19 is judged as they are.
		{`{"paymentToken":9999999999999999999}`, true},
		{`{"paymentToken":1e19}`, true},
		// Beyond 19 digits a number is no card number.
		{`{"paymentToken":1.2e19}`, false},
		{`{"paymentToken":62170000000000000040}`, false},
		{`{"paymentToken":"tok_6217000000000000004"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.data, func(t *testing.T) {
			want := Code("")
			if tt.denied {
				want = CodeRawPANDetected
			}
			require.Equal(t, want, gateCode(t, tokenizedGate{}, s, tt.data))
		})
	}
}

// The quarantined copy's backstop redaction uses the same test, so a
// 19-digit card number as a number is not kept in it either.
func TestRedactsNumbersBeyondDoublePrecision(t *testing.T) {
	data, err := decodeValue([]byte(`{"ref":6217000000000000004,"n":42}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"ref":"[REDACTED]","n":42}`, string(redactData(data, nil)))
}
