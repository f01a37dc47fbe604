package pigeon

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParseSelector checks that parsing never panics, that a parsed
// selector re-parses from its String() to an equal selector, that Match
// never panics on decoded JSON, and that a one-entry index agrees with Match.
func FuzzParseSelector(f *testing.F) {
	seeds := []struct{ sel, data string }{
		{"/", `{}`},
		{"/*", `null`},
		{"/kind=chat/room=lobby", `{"kind":"chat","room":"lobby","text":"hi"}`},
		{"/kind=chat/room=lobby", `{"kind":"chat","room":"kitchen"}`},
		{"/foo=bar/narf", `{"foo":"bar","narf":"blat"}`},
		{"/foo/narf/blat", `{"foo":"bar","narf":"blat"}`},
		{"/0=foo", `["foo","bar"]`},
		{"/customer.tier=gold", `{"customer":{"tier":"gold"}}`},
		{"/items.1.sku=B2", `{"items":[{"sku":"A1"},{"sku":"B2"}]}`},
		{"/n=3/f=2.5/t=true/z=null", `{"n":3,"f":2.5,"t":true,"z":null}`},
		{"/big=1e+21/tiny=1e-7/nz=-0", `{"big":1e21,"tiny":1e-7,"nz":-0}`},
		{"/a=/b=*/c/*", `{"a":null,"b":[],"c":{}}`},
		{"/a%2Eb=x%2Fy/p=50%25/r=%2A/e%3Dq=a=b", `{"a.b":"x/y","p":"50%","r":"*","e=q":"a=b"}`},
		{"/a%2eb=%2a", `{"a.b":"*"}`},
		{"//", `{}`},
		{"/a//b", `{}`},
		{"/a/", `{}`},
		{"/=x", `{}`},
		{"/a..b", `{}`},
		{"/.a", `{}`},
		{"/*/a", `{}`},
		{"/a*", `{}`},
		{"/%", `{}`},
		{"/%zz", `{}`},
		{"/%41", `{}`},
		{"/a\x00", `{}`},
		{"/a=\xff", `{}`},
		{"/名前=値", `{"名前":"値"}`},
		{"/0.0.0=x", `[[["x"]]]`},
		{"/id=12345678901234567891", `{"id":12345678901234567891}`},
		// As mesgd: what follows a '*' segment is ignored.
		{"/foo=bar/*/narf=borf", `{"foo":"bar","narf":"blat"}`},
		{"/foo=bar/*/narf=borf", `{"foo":"bar","narf":"borf"}`},
		{"/*/a", `{}`},
		{"/a=1/*//%zz/*", `{"a":1}`},
	}
	for _, s := range seeds {
		f.Add(s.sel, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, s string, data []byte) {
		sel, err := ParseSelector(s)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != CodeSelectorInvalid || !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseSelector(%q) error %v is not SELECTOR_INVALID", s, err)
			}
			if !sel.MatchesAll() || sel.String() != "/" {
				t.Fatalf("ParseSelector(%q) failed but returned %q", s, sel)
			}
			return
		}
		canon := sel.String()
		again, err := ParseSelector(canon)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", canon, s, err)
		}
		if !again.Equal(sel) || again.String() != canon || again.Key() != sel.Key() {
			t.Fatalf("canonical %q of %q re-parses to %q", canon, s, again)
		}
		if len(canon) > len(s) {
			t.Fatalf("canonical %q is longer than %q", canon, s)
		}
		// A '*' segment ends a selector, as in mesgd: anything after it
		// (here the input itself) is ignored, by Match and by the index.
		sels := []Selector{sel}
		starred := strings.TrimSuffix(canon, "/") + "/*" + s
		if len(starred) <= MaxSelectorLen && strings.Count(starred, "/") <= MaxSelectorSegments {
			tail, err := ParseSelector(starred)
			if err != nil {
				t.Fatalf("%q does not parse: %v", starred, err)
			}
			if !tail.Equal(sel) || tail.String() != canon {
				t.Fatalf("%q parses to %q, not %q", starred, tail, canon)
			}
			sels = append(sels, tail)
		}

		for _, useNumber := range []bool{false, true} {
			d := json.NewDecoder(bytes.NewReader(data))
			if useNumber {
				d.UseNumber()
			}
			var v any
			if d.Decode(&v) != nil {
				v = string(data) // still must not panic
			}
			got := sel.Match(v)
			if again.Match(v) != got {
				t.Fatalf("%q and its canonical %q disagree", s, canon)
			}
			for _, sel := range sels {
				if sel.Match(v) != got {
					t.Fatalf("%q and %q disagree", sel, s)
				}
				var idx selectorIndex[int]
				idx.Add(sel, 1)
				if n := len(idx.AppendMatches(nil, v)); (n == 1) != got || n > 1 {
					t.Fatalf("index returned %d matches for %q, Match says %v", n, s, got)
				}
				if !idx.Remove(again, 1) || idx.Len() != 0 || !idx.root.empty() {
					t.Fatalf("remove of %q left the index non-empty", canon)
				}
			}
		}
	})
}
