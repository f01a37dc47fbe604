package pigeon

import (
	"strings"
	"testing"
)

// hasControl runs on every publish, over the message id and each name
// the publisher sets: the common names are short ASCII, some are another
// script's text, and none is longer than MaxEnvelopeField bytes.
func BenchmarkHasControl(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"id", "0194f3a2-7c1e-7b2d-9f4e-3c2a1b0d9e8f"},
		{"subject", "payments.authorize"},
		{"latin", "commandes.créées.réexécution"},
		{"japanese", "注文.作成済み.東京リージョン"},
		{"ascii256", strings.Repeat("orders.eu", 29)[:256]},
		{"punctuation256", strings.Repeat("a—b…c’d", 23)[:253]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				if hasControl(bc.s) {
					b.Fatal(bc.s)
				}
			}
		})
	}
}
