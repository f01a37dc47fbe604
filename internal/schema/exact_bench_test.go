package schema

import (
	"testing"

	"pigeon/internal/jsontext"
)

// BenchmarkExactNumbers is the scan Validate makes of a message's data
// before it trusts the fast validator with its numbers: the demo payment.
func BenchmarkExactNumbers(b *testing.B) {
	raw := []byte(`{"merchantId":"m-100","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c","items":[{"sku":"a-1","qty":2,"price":10.25}]}`)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if !exactNumbers(raw) {
			b.Fatal("exact numbers refused")
		}
	}
}

// BenchmarkValidatePayment is the schema gate's work on the demo payment:
// Validate scans the data's numbers first; ValidateExact is told by the
// decoder that they are exact (jsontext.Document.Exact).
func BenchmarkValidatePayment(b *testing.B) {
	sch, err := Compile([]byte(testSchemas[0]))
	if err != nil {
		b.Fatal(err)
	}
	raw := []byte(`{"merchantId":"m-100","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c","items":[{"sku":"a-1","qty":2,"price":10.25}]}`)
	doc, err := jsontext.DecodeDocument(raw, 64, nil)
	if err != nil || !doc.Exact {
		b.Fatal("the payment does not decode exact")
	}
	for _, bc := range []struct {
		name string
		fn   func(any, []byte) string
	}{{"scan", sch.Validate}, {"told", sch.ValidateExact}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if r := bc.fn(doc.Value, raw); r != "" {
					b.Fatal(r)
				}
			}
		})
	}
}
