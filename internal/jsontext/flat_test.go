package jsontext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDecodeFlatPaymentAllocations bounds what decoding bench/compare's
// payment in the flat form costs: the copy of the text, one chunk of
// strings and one of numbers, one of members and one of objects, where
// DecodeDocument takes four more for its two maps.
func TestDecodeFlatPaymentAllocations(t *testing.T) {
	in := payment
	var names countedNames
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := DecodeFlat(in, dataDepth, &names, nil); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 5.0)
	require.Equal(t, 9*201, names.plain, "every top-level name is plain ASCII")
}

// TestTreeKeepsTrees: Tree returns a value without an Object as it is,
// maps and arrays unchanged, and turns {} and nested Objects into maps
// without changing the flat value.
func TestTreeKeepsTrees(t *testing.T) {
	in := `{"a":[1,{"b":"x"}],"c":{},"d":[[{}]]}`
	doc, err := DecodeDocument([]byte(in), dataDepth, nil)
	require.NoError(t, err)
	m := doc.Value.(map[string]any)
	got := Tree(doc.Value).(map[string]any)
	m["marker"] = true
	require.Equal(t, true, got["marker"], "the same map, not a copy")

	flat, err := DecodeFlat([]byte(in), dataDepth, nil, nil)
	require.NoError(t, err)
	o, isObject := flat.Value.(Object)
	require.True(t, isObject)
	want := map[string]any{"a": []any{1.0, map[string]any{"b": "x"}}, "c": map[string]any{}, "d": []any{[]any{map[string]any{}}}}
	require.Equal(t, want, Tree(flat.Value))
	a, _ := o.Get("a")
	require.IsType(t, Object{}, a.([]any)[1], "the flat value is not changed")
	require.Equal(t, want, Tree(flat.Value), "and made a tree again alike")
	require.Equal(t, map[string]any{}, Tree(emptyObject))
	require.Equal(t, "x", Tree("x"))
}

func BenchmarkDecodeFlatPayment(b *testing.B) {
	in := payment
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeFlat(in, dataDepth, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("arena", func(b *testing.B) {
		b.ReportAllocs()
		var ar Arena
		for b.Loop() {
			if _, err := DecodeFlat(in, dataDepth, nil, &ar); err != nil {
				b.Fatal(err)
			}
			ar.Reuse()
		}
	})
}

// TestDecodeFlatArenaAllocations: decoding the payment again and again in
// an Arena, reused in between, costs the copy of the text alone; and a
// document reused with ReuseObjects leaves its strings and numbers to
// what holds them, the arena taking new memory for them.
func TestDecodeFlatArenaAllocations(t *testing.T) {
	in := payment
	var ar Arena
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := DecodeFlat(in, dataDepth, nil, &ar); err != nil {
			t.Fatal(err)
		}
		ar.Reuse()
	})
	require.LessOrEqual(t, allocs, 1.0)

	doc, err := DecodeFlat(in, dataDepth, nil, &ar)
	require.NoError(t, err)
	tree := Tree(doc.Value).(map[string]any)
	ar.ReuseObjects()
	for range 3 {
		_, err := DecodeFlat([]byte(`{"merchantId":"zzzzz","amount":1e3,"x":["y"]}`), dataDepth, nil, &ar)
		require.NoError(t, err)
		ar.Reuse()
	}
	require.Equal(t, "m-100", tree["merchantId"])
	require.Equal(t, 42.5, tree["amount"])
	require.Equal(t, map[string]any{"cartId": "cart-5521", "ab": "b12"}, tree["metadata"])
}
