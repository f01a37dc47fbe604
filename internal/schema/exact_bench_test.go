package schema

import "testing"

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
