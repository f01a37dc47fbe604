package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

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
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			want := Code("")
			if tt.denied {
				want = CodeRawPANDetected
			}
			require.Equal(t, want, gateCode(t, tokenizedGate{}, s, `{"paymentToken":`+tt.token+`}`))
		})
	}
}
