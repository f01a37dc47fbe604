package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A "data." idempotency key that is a number was the decoded double
// written out, so two orders whose ids differ beyond double precision
// (9007199254740992 and 9007199254740993, or 0.1 and 0.10000000000000001)
// had one key: the second was answered "duplicate" with the first and
// never stored nor delivered, though its stored bytes, what a receiver
// gets, differ. A number is a key only as an integer that every text
// spelling it decodes to exactly (|n| < 2^53); any other number is no key.
func TestIdempotencyKeyNumbersAreExact(t *testing.T) {
	type step struct {
		orderID string // the JSON text of data.orderId
		want    string // pigeon.StatusAccepted, pigeon.StatusDuplicate or a refusal code
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"integers beyond 2^53", []step{
			{"9007199254740992", string(pigeon.CodeIdempotencyRequired)},
			{"9007199254740993", string(pigeon.CodeIdempotencyRequired)},
		}},
		{"decimals a double cannot tell apart", []step{
			{"0.1", string(pigeon.CodeIdempotencyRequired)},
			{"0.10000000000000001", string(pigeon.CodeIdempotencyRequired)},
		}},
		{"exact integers stay keys", []step{
			{"9007199254740991", pigeon.StatusAccepted},
			{"9007199254740990", pigeon.StatusAccepted},
			{"9007199254740991", pigeon.StatusDuplicate},
			{"-42", pigeon.StatusAccepted},
			{"-4.2e1", pigeon.StatusDuplicate}, // one value, another spelling
		}},
		{"strings stay keys", []step{
			{`"9007199254740993"`, pigeon.StatusAccepted},
			{`"9007199254740992"`, pigeon.StatusAccepted},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat := demo.Catalog()
			for i := range cat.Subjects {
				if cat.Subjects[i].Name == "payments.authorize" {
					cat.Subjects[i].Delivery.Idempotency.Key = "data.orderId"
					cat.Subjects[i].Schema = nil // orderId is a string in the demo schema
				}
			}
			f := newFixture(t, func(o *pigeon.Options) { o.Catalog = cat })
			s := f.connect("checkout-token", "payments.authorize")
			for _, st := range tt.steps {
				m := demo.Payment("x")
				m.IdempotencyKey = ""
				m.Data = json.RawMessage(`{"merchantId":"m","orderId":` + st.orderID + `,"amount":1,"currency":"GBP","paymentToken":"tok_1"}`)
				res, err := s.Publish(ctx, m)
				switch st.want {
				case pigeon.StatusAccepted, pigeon.StatusDuplicate:
					require.NoError(t, err, st.orderID)
					require.Equal(t, st.want, res.Status, st.orderID)
				default:
					requireCode(t, err, pigeon.Code(st.want))
				}
			}
		})
	}
}
