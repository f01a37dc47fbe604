package pigeon_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"pigeon"
)

// paymentNineMembers is bench/compare's payment: 259 bytes, nine members
// (one more than a small Go map holds) and a nested object.
const paymentNineMembers = `{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`

// BenchmarkPublishGovernedNineMembers is BenchmarkPublishGoverned with
// bench/compare's payment: what one in-process publisher pays per message.
func BenchmarkPublishGovernedNineMembers(b *testing.B) {
	e := benchEngine(b)
	s := benchSession(b, e, "checkout-token", "payments.authorize")
	ctx := context.Background()
	m := &pigeon.Message{
		Type:           "payment.authorization.requested",
		Subject:        "payments.authorize",
		Intent:         "authorize_payment",
		Classification: "pci",
		Region:         "uk",
		Data:           json.RawMessage(paymentNineMembers),
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.IdempotencyKey = "k-" + strconv.Itoa(i)
		if _, err := s.Publish(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}
