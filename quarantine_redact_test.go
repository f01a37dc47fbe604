package pigeon

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedactDataMatchesLikeTheGatesAndRedactsEveryCardNumber(t *testing.T) {
	s := pathSubject(t, []string{"card.pan", "items.1.cvv"}, []string{"paymentToken"})
	const in = `{
		"Card": {"PAN": "x1", "pan": "x2", "brand": "visa"},
		"card": [{"pan": "x3"}, {"other": 1}, [{"Pan": null}]],
		"items": [{"cvv": "123"}, {"CVV": "456"}],
		"paymentToken": "tok_1", "PAYMENTTOKEN": ["tok_2"],
		"notes": "4111 1111 1111 1111", "memo": "4111111111111111",
		"ref": 4111111111111111, "neg": -5500005555555559,
		"deep": {"a": [{"b": "378282246310005"}, "4111-1111-1111-1111", "tok_4111111111111111"]},
		"4111111111111111": "a card number as a member name",
		"amount": 42.5, "count": 4111111111111112, "id": "o-1"
	}`
	const want = `{
		"Card": {"PAN": "[REDACTED]", "pan": "[REDACTED]", "brand": "visa"},
		"card": [{"pan": "[REDACTED]"}, {"other": 1}, [{"Pan": "[REDACTED]"}]],
		"items": [{"cvv": "123"}, {"CVV": "[REDACTED]"}],
		"paymentToken": "[REDACTED]", "PAYMENTTOKEN": "[REDACTED]",
		"notes": "[REDACTED]", "memo": "[REDACTED]",
		"ref": "[REDACTED]", "neg": "[REDACTED]",
		"deep": {"a": [{"b": "[REDACTED]"}, "[REDACTED]", "tok_4111111111111111"]},
		"[REDACTED]": "a card number as a member name",
		"amount": 42.5, "count": 4111111111111112, "id": "o-1"
	}`
	data, err := decodeValue([]byte(in))
	require.NoError(t, err)
	before, err := json.Marshal(data)
	require.NoError(t, err)

	got := redactData(data, s.redact)
	require.JSONEq(t, want, string(got))
	after, err := json.Marshal(data)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the admitted data is not changed")

	// A number or string that is a card number is redacted at the top too.
	require.JSONEq(t, `"[REDACTED]"`, string(redactData("4111111111111111", nil)))
	require.JSONEq(t, `"[REDACTED]"`, string(redactData(4111111111111111.0, nil)))
	require.JSONEq(t, `null`, string(redactData(nil, s.redact)))
}
