package pigeon

import (
	"encoding/json"
	"fmt"
	"testing"
)

func selectorBenchData(b *testing.B, s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		b.Fatal(err)
	}
	return v
}

func BenchmarkSelectorMatch(b *testing.B) {
	data := selectorBenchData(b, `{"kind":"chat","room":"lobby","text":"hi","n":3,"customer":{"tier":"gold"},"items":[{"sku":"A1"},{"sku":"B2"}]}`)
	cases := []struct{ name, sel string }{
		{"all", "/"},
		{"two-eq", "/kind=chat/room=lobby"},
		{"miss", "/kind=chat/room=kitchen"},
		{"number", "/n=3"},
		{"nested", "/customer.tier=gold/items.1.sku=B2"},
	}
	for _, c := range cases {
		sel, err := ParseSelector(c.sel)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sel.Match(data)
			}
		})
	}
}

func BenchmarkParseSelector(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSelector("/kind=chat/room=lobby/customer.tier=gold"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSelectorIndex delivers one message for one room to n
// subscriptions "/kind=chat/room=room-N" on one subject, through the index
// and through a brute-force loop of Selector.Match.
func BenchmarkSelectorIndex(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		sels := make([]Selector, n)
		var idx selectorIndex[int]
		for i := range sels {
			sel, err := ParseSelector(fmt.Sprintf("/kind=chat/room=room-%d", i))
			if err != nil {
				b.Fatal(err)
			}
			sels[i] = sel
			idx.Add(sel, i)
		}
		data := selectorBenchData(b, fmt.Sprintf(`{"kind":"chat","room":"room-%d","text":"hi"}`, n/2))
		b.Run(fmt.Sprintf("subs=%d/index", n), func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]int, 0, 8)
			for b.Loop() {
				dst = idx.AppendMatches(dst[:0], data)
			}
			if len(dst) != 1 {
				b.Fatalf("%d matches", len(dst))
			}
		})
		b.Run(fmt.Sprintf("subs=%d/brute", n), func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]int, 0, 8)
			for b.Loop() {
				dst = dst[:0]
				for i := range sels {
					if sels[i].Match(data) {
						dst = append(dst, i)
					}
				}
			}
			if len(dst) != 1 {
				b.Fatalf("%d matches", len(dst))
			}
		})
	}
}
