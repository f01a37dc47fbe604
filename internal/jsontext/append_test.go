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
