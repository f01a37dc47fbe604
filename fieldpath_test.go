package pigeon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// pathSubject compiles a subject that forbids and tokenizes the given paths.
func pathSubject(t *testing.T, forbidden, tokenized []string) *subject {
	t.Helper()
	s, err := compileSubject(SubjectPolicy{Name: "t", Version: "v1", Data: DataPolicy{
		ForbiddenFields: forbidden, TokenizedFields: tokenized,
	}}, nil)
	require.NoError(t, err)
	return s
}

// gateCode runs g on data for s and returns the refusal's code, or "" when
// the gate allows.
func gateCode(t *testing.T, g Gate, s *subject, data string) Code {
	t.Helper()
	v, err := decodeValue([]byte(data))
	require.NoError(t, err, data)
	verdict := g.Check(context.Background(), &Admission{subj: s, Data: v})
	if verdict.Allowed() {
		return ""
	}
	return verdict.Code
}

// gateCase is a message's data, as text, and whether a gate denies it.
type gateCase struct {
	data   string
	denied bool
}

// requireGateCases checks g on s with each case's data: denied with code,
// or allowed.
func requireGateCases(t *testing.T, g Gate, s *subject, code Code, tests []gateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.data, func(t *testing.T) {
			want := Code("")
			if tt.denied {
				want = code
			}
			require.Equal(t, want, gateCode(t, g, s, tt.data))
		})
	}
}

func TestForbiddenGateMatchesAnyCaseAndThroughArrays(t *testing.T) {
	s := pathSubject(t, []string{"card.pan", "items.0.pan", "secret.key", "ssn"}, nil)
	tests := []gateCase{
		{`{"card":{"pan":"4111111111111111"}}`, true},
		// Member names match ignoring case.
		{`{"card":{"PAN":"x"}}`, true},
		{`{"Card":{"pan":"x"}}`, true},
		{`{"CARD":{"Pan":"x"}}`, true},
		{`{"SSN":1}`, true},
		{`{"ſſn":1}`, true},                    // U+017F folds to s
		{`{"secret":{"\u212Aey":true}}`, true}, // U+212A KELVIN SIGN folds to k
		{`{"secret":{"KEY":{}}}`, true},
		// A segment applied to an array applies to every element.
		{`{"card":[{"pan":"x"}]}`, true},
		{`{"card":[{"x":1},{"Pan":"x"}]}`, true},
		{`{"card":[[{"pan":"x"}]]}`, true},
		{`{"card":[1,"pan",null,{"pan":"x"}]}`, true},
		{`[{"card":{"pan":"x"}}]`, true},
		{`[[{"ssn":"x"}]]`, true},
		// An explicit numeric segment indexes an array, and is a member
		// name on an object.
		{`{"items":[{"pan":"x"}]}`, true},
		{`{"items":[{"x":1},{"pan":"x"}]}`, false},
		{`{"items":{"0":{"pan":"x"}}}`, true},
		{`{"items":[]}`, false},
		// Every member whose name folds to the segment is looked at.
		{`{"card":{"pan":null,"PAN":"x"}}`, true},
		{`{"card":{"PAN":"x","pan":null}}`, true},
		{`{"card":{"pan":null},"CARD":{"pan":"x"}}`, true},
		// Absent or null is allowed.
		{`{"card":{"pan":null}}`, false},
		{`{"card":[{"pan":null},{"PAN":null}]}`, false},
		{`{"card":{"PAN":null,"pan":null}}`, false},
		{`{"card":"pan"}`, false},
		{`{"cards":{"pan":"x"}}`, false},
		{`{"card":{"pans":"x","pa":"x","p an":"x"}}`, false},
		{`{"card.pan":"x"}`, false},
		{`{"ssnx":1,"xssn":1,"ſn":1}`, false},
		{`{"secret":{"ke":1,"keys":1}}`, false},
		{`"card"`, false},
		{`null`, false},
	}
	requireGateCases(t, forbiddenGate{}, s, CodeSensitiveFieldDenied, tests)
}

func TestTokenizedGateMatchesAnyCaseAndThroughArrays(t *testing.T) {
	s := pathSubject(t, nil, []string{"paymentToken", "wallet.token"})
	tests := []gateCase{
		{`{"paymentToken":"4111111111111111"}`, true},
		{`{"PaymentToken":"4111 1111 1111 1111"}`, true},
		{`{"paymenttoken":4111111111111111}`, true},
		{`{"paymentToken":-4111111111111111}`, true},
		{`{"paymentToken":"tok_1","PAYMENTTOKEN":"4111111111111111"}`, true},
		{`{"PAYMENTTOKEN":"4111111111111111","paymentToken":"tok_1"}`, true},
		{`{"paymentToken":["tok_1","5500005555555559"]}`, true},
		{`{"paymentToken":[["tok_1"],[378282246310005]]}`, true},
		{`[{"paymentToken":"4111111111111111"}]`, true},
		{`{"wallet":[{"token":"tok_1"},{"Token":"4111111111111111"}]}`, true},
		{`{"Wallet":{"TOKEN":"4111-1111-1111-1111"}}`, true},
		{`{"paymentToken":"tok_1"}`, false},
		{`{"paymentToken":"tok_1","PaymentToken":"tok_2"}`, false},
		{`{"paymentToken":["tok_1",4111111111111112]}`, false},
		{`{"paymentToken":4111111111111111.5}`, false},
		{`{"paymentToken":42.5}`, false},
		{`{"notes":"4111111111111111"}`, false}, // not a tokenized field
		{`{"wallet":[{"token":"tok_1"}]}`, false},
	}
	requireGateCases(t, tokenizedGate{}, s, CodeRawPANDetected, tests)
}
