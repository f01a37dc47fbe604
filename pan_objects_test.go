package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A tokenized field must hold a token. The gate looked at strings,
// numbers and arrays only, so an object under the field passed whatever it
// held: {"paymentToken":{"pan":"4111111111111111"}} delivered a raw card
// number at paymentToken.pan, and {"paymentToken":{"4111111111111111":1}}
// one as a member name. Objects are looked into, values and names, as the
// quarantine's redaction already does.
func TestTokenizedFieldHoldingAnObject(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken"})
	tests := []struct {
		data   string
		denied bool
	}{
		{`{"paymentToken":{"pan":"4111111111111111"}}`, true},
		{`{"paymentToken":{"card":{"number":4111111111111111}}}`, true},
		{`{"paymentToken":[{"x":"tok_1"},{"pan":"4111 1111 1111 1111"}]}`, true},
		{`{"paymentToken":{"4111111111111111":true}}`, true},
		{`{"paymentToken":{"id":"tok_1","last4":"1111","exp":"12/30"}}`, false},
		{`{"paymentToken":{}}`, false},
		{`{"paymentToken":{"pan":null}}`, false},
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
