package datapath

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
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
