package datapath

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

// flatSeeds are documents and paths for FuzzFlatMatchesTree: objects of
// up to 16 members (an Object in the flat form) and more (a map), nested
// in arrays and in each other.
var flatSeeds = [][2]string{
	{`{"card":{"pan":"4111111111111111"}}`, "card.pan"},
	{`{"Card":{"PAN":1},"card":{"pan":2}}`, "card.pan"},
	{`{"paymentToken":"tok","PaymentToken":"4111"}`, "paymentToken"},
	{`{"\u212aey":1}`, "key"},
	{`[{"a":1},{"A":2},[{"a":{"b":3}}]]`, "a"},
	{`{"0":{"x":1},"a":[{"x":2}]}`, "0.x"},
	{`{"a":[{"x":2},{"x":3}]}`, "a.1.x"},
	{`{"a":null}`, "a"},
	{`{}`, "a.b"},
	{`{"m0":1,"m1":2,"m2":3,"m3":4,"m4":5,"m5":6,"m6":7,"m7":8,"m8":9,"m9":10,"ma":11,"mb":12,"mc":13,"md":14,"me":15,"mf":16,"mg":{"x":[{"y":1}]}}`, "mg.x.y"},
	{`{"merchantId":"m-100","amount":42.5,"paymentToken":"tok_9f","metadata":{"cartId":"cart-5521","ab":"b12"}}`, "metadata.ab"},
}

// FuzzFlatMatchesTree holds Lookup, Find and FindIn on a document in the
// flat form (jsontext.DecodeFlat) to the same calls on its tree
// (jsontext.DecodeDocument): the same answers, and the same values found,
// once made trees.
func FuzzFlatMatchesTree(f *testing.F) {
	for _, seed := range flatSeeds {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, doc, path string) {
		var treeTop, flatTop Names
		tree, err := jsontext.DecodeDocument([]byte(doc), 32, &treeTop)
		if err != nil {
			return
		}
		flat, err := jsontext.DecodeFlat([]byte(doc), 32, &flatTop, nil)
		require.NoError(t, err)
		require.Equal(t, treeTop, flatTop)
		p := Parse(path)

		want, wok := p.Lookup(tree.Value)
		got, gok := p.Lookup(flat.Value)
		require.Equal(t, wok, gok, "Lookup found")

		stops := []func(any) bool{func(v any) bool { return v != nil }, func(any) bool { return true }, func(any) bool { return false }}
		for _, stop := range stops {
			require.Equal(t, p.Find(tree.Value, stop), p.Find(flat.Value, stop), "Find")
			require.Equal(t, p.FindIn(tree.Value, &treeTop, stop), p.FindIn(flat.Value, &flatTop, stop), "FindIn")
		}
		var wantAll, gotAll, gotIn []any
		p.Find(tree.Value, func(v any) bool { wantAll = append(wantAll, v); return false })
		p.Find(flat.Value, func(v any) bool { gotAll = append(gotAll, v); return false })
		p.FindIn(flat.Value, &flatTop, func(v any) bool { gotIn = append(gotIn, v); return false })

		// Made trees last: Tree changes the flat document's arrays and
		// maps in place.
		require.Equal(t, fmt.Sprint(want), fmt.Sprint(jsontext.Tree(got)), "Lookup's value")
		require.ElementsMatch(t, texts(wantAll), texts(gotAll), "Find's values")
		require.ElementsMatch(t, texts(wantAll), texts(gotIn), "FindIn's values")
	})
}

// texts is each value made a tree, as fmt prints it.
func texts(vs []any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprint(jsontext.Tree(v))
	}
	return out
}
