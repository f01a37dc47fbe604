package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Tokenized fields (tokenizedGate, and the quarantine's redaction, which
// uses the same test) judged as the store keeps the data: numbers beyond
// double precision, every Unicode separator, objects under the field.

// A JSON number beyond 2^53 decodes to the nearest double, so the digits
// the tokenized gate judged were not those the store keeps and a receiver
// that reads numbers exactly (json.Number, Jackson, Python) gets: the
// 19-digit card number 6217000000000000004 decodes to 6217000000000000000,
// which fails Luhn, and passed. A number is a card number when any integer
// its text could spell (any that rounds to the decoded double) is one.
func TestTokenizedNumbersBeyondDoublePrecision(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken"})
	tests := []gateCase{
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
	requireGateCases(t, tokenizedGate{}, s, CodeRawPANDetected, tests)
}

// The quarantined copy's backstop redaction uses the same test, so a
// 19-digit card number as a number is not kept in it either.
func TestRedactsNumbersBeyondDoublePrecision(t *testing.T) {
	data, err := decodeValue([]byte(`{"ref":6217000000000000004,"n":42}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"ref":"[REDACTED]","n":42}`, string(redactData(data, nil)))
}

// A tokenized field must hold a token. The gate looked at strings,
// numbers and arrays only, so an object under the field passed whatever it
// held: {"paymentToken":{"pan":"4111111111111111"}} delivered a raw card
// number at paymentToken.pan, and {"paymentToken":{"4111111111111111":1}}
// one as a member name. Objects are looked into, values and names, as the
// quarantine's redaction already does.
func TestTokenizedFieldHoldingAnObject(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken"})
	tests := []gateCase{
		{`{"paymentToken":{"pan":"4111111111111111"}}`, true},
		{`{"paymentToken":{"card":{"number":4111111111111111}}}`, true},
		{`{"paymentToken":[{"x":"tok_1"},{"pan":"4111 1111 1111 1111"}]}`, true},
		{`{"paymentToken":{"4111111111111111":true}}`, true},
		{`{"paymentToken":{"id":"tok_1","last4":"1111","exp":"12/30"}}`, false},
		{`{"paymentToken":{}}`, false},
		{`{"paymentToken":{"pan":null}}`, false},
	}
	requireGateCases(t, tokenizedGate{}, s, CodeRawPANDetected, tests)
}

// tokenizedFields ignores the spaces and dashes between a card number's
// digits, but only the ASCII space and hyphen were: a tab, a newline, a
// no-break space or an en dash between the groups hid the number from the
// gate, while it reads, prints and parses (after the usual strip of white
// space) as the card number to a receiver. Every Unicode space and dash is
// a separator.
func TestCardNumbersWithOtherSpacesAndDashes(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken"})
	tests := []struct {
		token  string // a JSON string
		denied bool
	}{
		{`"4111 1111 1111 1111"`, true},
		{`"4111-1111-1111-1111"`, true},
		{`"4111\t1111\t1111\t1111"`, true},
		{`"4111111111111111\n"`, true},
		{`"\r\n4111111111111111"`, true},
		{`"4111\u00a01111\u00a01111\u00a01111"`, true},  // no-break space
		{`"4111\u20071111\u20071111\u20071111"`, true},  // figure space
		{`"4111\u3000 1111 1111 1111"`, true},           // ideographic space
		{`"4111\u20131111\u20131111\u20131111"`, true},  // en dash
		{`"4111\u22121111\u22121111\u22121111"`, false}, // minus sign: no dash (Sm)
		{`"4111\u20101111\u20101111\u20101111"`, true},  // hyphen
		{`"4111\t1111\t1111\t1112"`, false},             // not Luhn-valid
		{`"tok_4111\t1111\t1111\t1111"`, false},
		{`"4111\u00b71111\u00b71111\u00b71111"`, false}, // middle dot: not a separator
	}
	cases := make([]gateCase, len(tests))
	for i, tt := range tests {
		cases[i] = gateCase{`{"paymentToken":` + tt.token + `}`, tt.denied}
	}
	requireGateCases(t, tokenizedGate{}, s, CodeRawPANDetected, cases)
}
