package datapath

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	return v
}

func TestLookupIsExact(t *testing.T) {
	data := decode(t, `{"order":{"ID":"a","items":[{"sku":"x"}]}}`)
	for _, tc := range []struct {
		path string
		want any
		ok   bool
	}{
		{"order.ID", "a", true},
		{"order.id", nil, false},
		{"order.items.0.sku", "x", true},
		{"order.items.sku", nil, false},
		{"order.items.1", nil, false},
		{"order.ID.x", nil, false},
	} {
		p := Parse(tc.path)
		v, ok := p.Lookup(data)
		require.Equal(t, tc.ok, ok, tc.path)
		require.Equal(t, tc.want, v, tc.path)
	}
}

func TestFindFoldsCaseAndReachesIntoArrays(t *testing.T) {
	data := decode(t, `{"Card":[{"PAN":1},[{"pan":2}],{"x":3}]}`)
	p := Parse("card.pan")
	var got []any
	p.Find(data, func(v any) bool { got = append(got, v); return false })
	require.ElementsMatch(t, []any{1.0, 2.0}, got)

	p.Set(data, "[REDACTED]")
	require.Equal(t, decode(t, `{"Card":[{"PAN":"[REDACTED]"},[{"pan":"[REDACTED]"}],{"x":3}]}`), data)
}

func TestWellFormed(t *testing.T) {
	for p, want := range map[string]bool{
		"card.pan": true, "a": true, "items.0.sku": true, "ünï.cödé": true,
		"": false, "a..b": false, ".a": false, "a.": false, "a b": false, "a\tb": false,
		"a[0]": false, "a.*": false,
	} {
		require.Equal(t, want, WellFormed(p), p)
	}
}

// FuzzFindIn holds FindIn, with the decoder's summary of the top-level
// names, to Find: the same answer when fn stops at the first match, and
// the same values visited when it never does.
func FuzzFindIn(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"card":{"pan":"4111111111111111"}}`, "card.pan"},
		{`{"Card":{"PAN":1},"card":{"pan":2}}`, "card.pan"},
		{`{"paymentToken":"tok","PaymentToken":"4111"}`, "paymentToken"},
		{`{"PAYMENTTOKEN":"4111"}`, "paymentToken"},
		{`{"\u212aey":1}`, "key"},
		{`{"ſecret":1}`, "secret"},
		{`[{"a":1},{"A":2}]`, "a"},
		{`{"0":{"x":1},"a":[{"x":2}]}`, "0.x"},
		{`{"":1}`, ""},
		{`{"a":null}`, "a"},
		{`{}`, "a.b"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, doc, path string) {
		var top Names
		d, err := jsontext.DecodeDocument([]byte(doc), 32, &top)
		if err != nil {
			return
		}
		data := d.Value
		p := Parse(path)
		for _, stop := range []func(any) bool{func(v any) bool { return v != nil }, func(any) bool { return true }} {
			require.Equal(t, p.Find(data, stop), p.FindIn(data, &top, stop))
		}
		var all, in []string
		p.Find(data, func(v any) bool { all = append(all, fmt.Sprint(v)); return false })
		p.FindIn(data, &top, func(v any) bool { in = append(in, fmt.Sprint(v)); return false })
		require.ElementsMatch(t, all, in)
	})
}

func TestFindInSkipsWhatCannotMatch(t *testing.T) {
	doc := `{"merchantId":"m","amount":1,"PAN":"x","pan":"y","paymentToken":"4111111111111111"}`
	var top Names
	d, err := jsontext.DecodeDocument([]byte(doc), 32, &top)
	require.NoError(t, err)
	data := d.Value
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"paymentToken", []string{"4111111111111111"}},
		{"PAYMENTTOKEN", []string{"4111111111111111"}},
		{"pan", []string{"x", "y"}},
		{"card.pan", nil},
		{"amount", []string{"1"}},
	} {
		var got []string
		p := Parse(tc.path)
		p.FindIn(data, &top, func(v any) bool { got = append(got, fmt.Sprint(v)); return false })
		require.ElementsMatch(t, tc.want, got, tc.path)
	}
}
