package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// requireQuarantinedWithout publishes m, which must be refused with code and
// quarantined, and checks that no text in absent appears anywhere in the
// quarantine record nor in the error. It returns the refusal and the
// quarantined copy's data.
func requireQuarantinedWithout(t *testing.T, f *fixture, s pigeon.Session, m *pigeon.Message, code pigeon.Code, absent ...string) (*pigeon.Error, map[string]any) {
	t.Helper()
	_, perr := s.Publish(ctx, m)
	pe := requireCode(t, perr, code)
	require.ErrorIs(t, perr, pigeon.ErrQuarantined)
	rec, err := f.e.QuarantineRecord(ctx, pe.Details["quarantineId"].(string))
	require.NoError(t, err)
	require.NotNil(t, rec.Message)
	all, err := json.Marshal(rec)
	require.NoError(t, err)
	for _, a := range absent {
		require.NotContains(t, string(rec.Body), a)
		require.NotContains(t, string(all), a)
		require.NotContains(t, perr.Error(), a)
	}
	var data map[string]any
	require.NoError(t, json.Unmarshal(rec.Message.Data, &data))
	return pe, data
}

func TestForbiddenAndTokenizedFieldsMatchAnyCaseAndArrays(t *testing.T) {
	const pan = "4111111111111111"
	const base = `"merchantId":"m","orderId":"o","amount":1,"currency":"GBP"`
	tests := []struct {
		name string
		data string
		code pigeon.Code
		gate string
	}{
		{"card.PAN", `{` + base + `,"paymentToken":"tok_1","card":{"PAN":"` + pan + `"}}`, pigeon.CodeSensitiveFieldDenied, pigeon.GateForbidden},
		{"Card.pan", `{` + base + `,"paymentToken":"tok_1","Card":{"pan":"` + pan + `"}}`, pigeon.CodeSensitiveFieldDenied, pigeon.GateForbidden},
		{"card in an array", `{` + base + `,"paymentToken":"tok_1","card":[{"pan":"` + pan + `"}]}`, pigeon.CodeSensitiveFieldDenied, pigeon.GateForbidden},
		{"PAN beside a null pan", `{` + base + `,"paymentToken":"tok_1","card":{"pan":null,"PAN":"` + pan + `"}}`, pigeon.CodeSensitiveFieldDenied, pigeon.GateForbidden},
		{"PAYMENTTOKEN beside a token", `{` + base + `,"paymentToken":"tok_1","PAYMENTTOKEN":"` + pan + `"}`, pigeon.CodeRawPANDetected, pigeon.GateTokenized},
		{"paymentToken list", `{` + base + `,"paymentToken":["tok_1","` + pan + `"]}`, pigeon.CodeRawPANDetected, pigeon.GateTokenized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			s := f.connect("checkout-token", "payments.authorize")
			m := demo.Payment("o-1")
			m.Data = json.RawMessage(tt.data)
			pe, data := requireQuarantinedWithout(t, f, s, m, tt.code, pan)
			require.Equal(t, tt.gate, pe.Decision.Gate)
			require.Equal(t, "m", data["merchantId"], "other fields are kept")
		})
	}
}

func TestQuarantineRedactsCardNumbersInUnlistedFields(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	// Refused by the schema (amount is not a number), with card numbers in
	// fields that no policy names.
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":"lots","currency":"GBP","paymentToken":"tok_1",
		"notes":"4111111111111111","ref":5500005555555559,"extra":{"list":[{"x":"3782-8224-6310-005"}]}}`)
	m.Reason = "4111 1111 1111 1111"
	_, data := requireQuarantinedWithout(t, f, s, m, pigeon.CodeSchemaInvalid,
		"4111111111111111", "5500005555555559", "3782-8224-6310-005", "4111 1111 1111 1111")
	require.Equal(t, pigeon.Redacted, data["notes"])
	require.Equal(t, pigeon.Redacted, data["ref"])
	require.Equal(t, pigeon.Redacted, data["extra"].(map[string]any)["list"].([]any)[0].(map[string]any)["x"])
	require.Equal(t, "lots", data["amount"], "other fields are kept")
	require.Equal(t, "o", data["orderId"])
}
