package datapath

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    string
		known  bool
		folds  map[string]int // name → how many members fold to it
		absent []string       // names no member folds to, checked only where their bit is free
	}{
		{name: "empty object", doc: `{}`, known: true, absent: []string{"a", "pan", ""}},
		{name: "one of each", doc: `{"merchantId":1,"paymentToken":"t","card":{"pan":1}}`, known: true,
			folds: map[string]int{"paymenttoken": 1, "PAYMENTTOKEN": 1, "merchantId": 1, "card": 1, "pan": 0}},
		{name: "two spellings", doc: `{"pan":1,"PAN":2,"Pan":3}`, known: true, folds: map[string]int{"pan": 3, "pAn": 3}},
		{name: "empty name", doc: `{"":1}`, known: true, folds: map[string]int{"": 1}},
		{name: "escaped name", doc: `{"\u0070an":1}`, known: true, folds: map[string]int{"PAN": 1}},
		{name: "kelvin sign", doc: `{"\u212aey":1}`, known: false, folds: map[string]int{"key": 1}},
		{name: "long s", doc: `{"ſecret":1,"b":2}`, known: false, folds: map[string]int{"secret": 1}},
		{name: "any non-ASCII name", doc: `{"a":1,"é":2}`, known: false, folds: map[string]int{"a": 1}},
		{name: "more members than linearDups", doc: `{` + manyMembers(40) + `,"Pan":1}`, known: true, folds: map[string]int{"pan": 1, "m7": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fs Names
			_, err := jsontext.DecodeDocument([]byte(tc.doc), 10, &fs)
			require.NoError(t, err)
			require.Equal(t, tc.known, fs.known)
			for name, n := range tc.folds {
				bit, ok := foldBitOf(name)
				require.True(t, ok)
				if n > 0 {
					require.False(t, fs.absent(bit), "%s is there", name)
				}
				if n > 1 {
					require.False(t, fs.single(bit), "%s is there %d times", name, n)
				}
				if !tc.known {
					require.False(t, fs.absent(bit))
					require.False(t, fs.single(bit))
				}
			}
			for _, name := range tc.absent {
				bit, _ := foldBitOf(name)
				require.True(t, fs.absent(bit), name)
			}
		})
	}
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"m` + string(rune('0'+i%10)) + strings.Repeat("x", i/10) + `":1`)
	}
	return b.String()
}

func TestNamesOnlyForAnObject(t *testing.T) {
	for _, doc := range []string{`[{"a":1}]`, `"a"`, `1`, `null`} {
		var fs Names
		_, err := jsontext.DecodeDocument([]byte(doc), 10, &fs)
		require.NoError(t, err)
		require.Equal(t, Names{}, fs, "%s: nothing known", doc)
	}
	var zero Names
	bit, _ := foldBitOf("a")
	require.False(t, zero.absent(bit), "the zero set knows nothing")
	require.False(t, zero.single(bit))
	_, ok := foldBitOf("é")
	require.False(t, ok)
}

func TestFoldBitFoldsCase(t *testing.T) {
	for _, pair := range [][2]string{{"pan", "PAN"}, {"paymentToken", "PAYMENTTOKEN"}, {"a-b_c.1", "A-B_C.1"}, {"", ""}} {
		a, _ := foldBitOf(pair[0])
		b, _ := foldBitOf(pair[1])
		require.Equal(t, a, b, pair)
		require.NotZero(t, a)
		require.Equal(t, 1, popcount(a))
	}
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
