package jsontext

import (
	"encoding/json"
	"testing"
)

// FuzzStringLen checks StringLen against encoding/json and AppendString.
func FuzzStringLen(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " back \ slash`, "<html>&", "ctl \x00\x1f\n\r\t\b\f", "\u2028\u2029", "bad \xff utf8 \xe2\x80", "é日本", "0123456789abcdef<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := StringLen(s); got != len(want) || got != len(AppendString(nil, s)) {
			t.Fatalf("StringLen(%q) = %d, want %d (%s)", s, got, len(want), want)
		}
	})
}

// TestStringLenAllocates: counting writes nothing.
func TestStringLenAllocates(t *testing.T) {
	s := "a value with <html>, a \"quote\", a tab\t, é and \u2028 in it"
	if n := testing.AllocsPerRun(100, func() { StringLen(s) }); n != 0 {
		t.Fatalf("StringLen allocates %v times", n)
	}
}
