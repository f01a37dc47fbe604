package jsontext

import (
	"encoding/json"
	"testing"
)

// FuzzAppendString checks the hand-written JSON string encoder of the hot
// paths against encoding/json.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " back \ slash`, "<html>&", "ctl \x00\x1f\n\r\t", "\u2028\u2029", "bad \xff utf8", "é日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// BenchmarkAppendString: the strings of an accepted payment's envelope.
func BenchmarkAppendString(b *testing.B) {
	strs := []string{"1.0", "msg_4vor10wpdfk253p08mhm", "payment.authorization.requested",
		"spiffe://merchant-prod/ns/checkout/sa/checkout-api", "payments.authorize", "2026-11-29T12:00:01.000Z",
		"authorize_payment", "pay-1", "pci", "uk", "ctr_5b0c2a9e7d", "payment.authorization.v1"}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, s := range strs {
			buf = AppendString(buf, s)
		}
	}
}
