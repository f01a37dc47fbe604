package pigeon

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeSelectorData decodes s as the broker decodes message data; with useNumber
// numbers become json.Number.
func decodeSelectorData(t testing.TB, s string, useNumber bool) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	if useNumber {
		d.UseNumber()
	}
	var v any
	require.NoError(t, d.Decode(&v), "test data %q", s)
	return v
}

func mustParseSelector(t testing.TB, s string) Selector {
	t.Helper()
	sel, err := ParseSelector(s)
	require.NoError(t, err, "selector %q", s)
	return sel
}

func TestParseSelectorCanonical(t *testing.T) {
	segs32 := "/" + strings.TrimSuffix(strings.Repeat("a/", 32), "/")
	long := "/k=" + strings.Repeat("v", MaxSelectorLen-3)
	tests := []struct{ in, want string }{
		{"/", "/"},
		{"/*", "/"},
		{"/kind=chat/room=lobby", "/kind=chat/room=lobby"},
		{"/room=lobby/kind=chat", "/kind=chat/room=lobby"},
		{"/b/a", "/a/b"},
		{"/a=", "/a"},
		{"/a=*", "/a"},
		{"/a/a=/a=*", "/a"},
		{"/a=b/a=b", "/a=b"},
		{"/a=c/a=b", "/a=b/a=c"},
		{"/a=b/*", "/a=b"},
		// As mesgd: a '*' segment ends the selector; what follows is ignored.
		{"/foo=bar/*/narf=borf", "/foo=bar"},
		{"/*/a", "/"},
		{"/*/*", "/"},
		{"/*/", "/"},
		{"/a=b/*/c", "/a=b"},
		{"/b/a/*/c/d=e", "/a/b"},
		{"/a/*/%zz/=x/a..b//a*", "/a"},
		{"/foo=bar/narf", "/foo=bar/narf"},
		{"/customer.tier=gold", "/customer.tier=gold"},
		{"/items.0.sku", "/items.0.sku"},
		{"/eq=a=b", "/eq=a=b"},
		{"/eq==", "/eq=="},
		{"/eq=a%3Db", "/eq=a=b"},
		{"/a%2eb=1", "/a%2Eb=1"},
		{"/a%3db=1", "/a%3Db=1"},
		{"/a=x%2fy", "/a=x%2Fy"},
		{"/a=x%2Ey", "/a=x.y"},
		{"/a=1.5", "/a=1.5"},
		{"/a=%25", "/a=%25"},
		{"/a=%2a", "/a=%2A"},
		{"/%2A=1", "/%2A=1"},
		{"/%25%2F%3D%2E%2A", "/%25%2F%3D%2E%2A"},
		{"/名前=値", "/名前=値"},
		{"/a b=c d", "/a b=c d"},
		{"/a=\uFFFD", "/a=\uFFFD"},
		{segs32, "/a"},
		{long, long},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			sel := mustParseSelector(t, tt.in)
			require.Equal(t, tt.want, sel.String())
			require.Equal(t, tt.want, sel.Key())
			again := mustParseSelector(t, sel.String())
			require.True(t, again.Equal(sel), "re-parse of %q", sel.String())
			require.Equal(t, sel.String(), again.String())
		})
	}
}

func TestParseSelectorInvalid(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"no leading slash", "kind=chat"},
		{"no leading slash star", "*"},
		{"double slash", "//"},
		{"empty middle segment", "/a//b"},
		{"trailing slash", "/a/"},
		{"empty key", "/=x"},
		{"empty key no value", "/="},
		{"empty key part", "/a..b"},
		{"leading dot", "/.a"},
		{"trailing dot", "/a."},
		{"trailing dot with value", "/a.=x"},
		{"control character after star", "/a/*/b\x00"},
		{"invalid UTF-8 after star", "/a/*/\xff"},
		{"too long with star", "/a/*/" + strings.Repeat("v", MaxSelectorLen-4)},
		{"star key with value", "/*=x"},
		{"star key part", "/a.*"},
		{"star inside key", "/a*"},
		{"star inside value", "/a=b*"},
		{"star prefix value", "/a=*b"},
		{"bare percent", "/%"},
		{"truncated escape", "/%2"},
		{"truncated escape in value", "/a=%2"},
		{"non-hex escape", "/%zz"},
		{"unsupported escape", "/%41"},
		{"unsupported escape in value", "/a=%20"},
		{"NUL", "/a\x00"},
		{"tab", "/a\tb"},
		{"newline in value", "/a=b\n"},
		{"DEL", "/a=\x7f"},
		{"C1 control", "/a=\u0085"},
		{"invalid UTF-8", "/a=\xff"},
		{"too long", "/k=" + strings.Repeat("v", MaxSelectorLen-2)},
		{"too many segments", "/" + strings.TrimSuffix(strings.Repeat("a/", 33), "/")},
		{"too many segments with star", "/" + strings.Repeat("a/", 32) + "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := ParseSelector(tt.in)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalid), "errors.Is(err, ErrInvalid)")
			var pe *Error
			require.True(t, errors.As(err, &pe))
			require.Equal(t, CodeSelectorInvalid, pe.Code)
			require.Equal(t, CodeSelectorInvalid, ErrorCode(err))
			require.True(t, sel.Equal(Selector{}))
			if len(tt.in) > 3 {
				require.NotContains(t, err.Error(), tt.in, "error message must not echo the selector")
			}
		})
	}
}

func TestSelectorMatch(t *testing.T) {
	const chat = `{"kind":"chat","room":"lobby","text":"hi"}`
	const foo = `{"foo":"bar","narf":"blat"}`
	const mixed = `{"s":"x","n":3,"f":2.5,"big":1e+21,"tiny":1e-7,"neg":-0.5,"negz":-0,"t":true,"no":false,"nil":null,"obj":{"a":1},"arr":[1,2],"empty":""}`
	const nested = `{"customer":{"tier":"gold","tags":["vip","eu"],"addr":{"city":"Oslo"}},"items":[{"sku":"A1","qty":2},{"sku":"B2","qty":1}]}`
	tests := []struct {
		sel, data string
		want      bool
	}{
		// The examples of the specification.
		{"/kind=chat/room=lobby", chat, true},
		{"/kind=chat/room=lobby", `{"kind":"chat","room":"kitchen"}`, false},
		{"/foo=bar/narf", foo, true},
		{"/foo/narf/blat", foo, false},

		// Match-all.
		{"/", chat, true},
		{"/", `null`, true},
		{"/", `"scalar"`, true},
		{"/*", `[]`, true},
		{"/kind=chat/*", chat, true},
		{"/kind=chat/*", foo, false},

		// As mesgd: '*' matches everything from there on, so a segment
		// after it is ignored.
		{"/foo=bar/*/narf=borf", foo, true},
		{"/foo=bar/*/narf=borf", `{"foo":"bar"}`, true},
		{"/foo=bar/*/narf=borf", `{"foo":"baz","narf":"borf"}`, false},
		{"/*/kind=other", chat, true},
		{"/*/kind=other", `null`, true},
		{"/kind=chat/*/room=kitchen/missing", chat, true},

		// Equality on strings is exact.
		{"/kind=chat", chat, true},
		{"/kind=Chat", chat, false},
		{"/kind=cha", chat, false},
		{"/missing=x", chat, false},
		{"/s=x", mixed, true},

		// Numbers compare by their JSON text as encoding/json writes a float64.
		{"/n=3", mixed, true},
		{"/n=3.0", mixed, false},
		{"/n=03", mixed, false},
		{"/n=+3", mixed, false},
		{"/f=2.5", mixed, true},
		{"/f=2.50", mixed, false},
		{"/big=1e+21", mixed, true},
		{"/big=1e21", mixed, false},
		{"/tiny=1e-7", mixed, true},
		{"/tiny=1e-07", mixed, false},
		{"/neg=-0.5", mixed, true},
		{"/negz=-0", mixed, true},
		{"/negz=0", mixed, false},
		{"/n=x", mixed, false},

		// Booleans and null.
		{"/t=true", mixed, true},
		{"/t=false", mixed, false},
		{"/no=false", mixed, true},
		{"/nil=null", mixed, true},
		{"/s=null", mixed, false},
		{"/n=true", mixed, false},

		// Objects and arrays never equal a value, but are present.
		{"/obj=[object Object]", mixed, false},
		{"/obj={}", mixed, false},
		{`/arr=[1,2]`, mixed, false},
		{"/obj", mixed, true},
		{"/arr", mixed, true},

		// Presence: key, key= and key=*; null counts as present.
		{"/nil", mixed, true},
		{"/nil=", mixed, true},
		{"/nil=*", mixed, true},
		{"/empty", mixed, true},
		{"/absent", mixed, false},
		{"/absent=", mixed, false},
		{"/absent=*", mixed, false},

		// Array data: integer keys are indexes.
		{"/0=foo", `["foo","bar"]`, true},
		{"/1=bar", `["foo","bar"]`, true},
		{"/1=foo", `["foo","bar"]`, false},
		{"/2", `["foo","bar"]`, false},
		{"/1", `["foo","bar"]`, true},
		{"/01=bar", `["foo","bar"]`, false},
		{"/-1", `["foo","bar"]`, false},
		{"/x", `["foo","bar"]`, false},
		{"/0", `[]`, false},
		{"/0=foo", `{"0":"foo"}`, true},
		{"/01=foo", `{"01":"foo"}`, true},
		{"/99999999999999999999", `{"99999999999999999999":1}`, true},
		{"/0.a=1", `[{"a":1}]`, true},

		// Dotted keys walk into objects and arrays at any level.
		{"/customer.tier=gold", nested, true},
		{"/customer.tier=silver", nested, false},
		{"/customer.addr.city=Oslo", nested, true},
		{"/customer.tags.0=vip", nested, true},
		{"/customer.tags.1=eu", nested, true},
		{"/customer.tags.2", nested, false},
		{"/items.1.sku=B2", nested, true},
		{"/items.1.qty=1", nested, true},
		{"/items.0.sku=A1/items.1.sku=B2", nested, true},
		{"/items.sku", nested, false},
		{"/customer.tier.x", nested, false},
		{"/customer.tier", `{"customer":"gold"}`, false},
		{"/0.0.0=x", `[[["x"]]]`, true},

		// Escapes match '/', '=', '.', '%' and '*' literally.
		{"/a%2Eb=1", `{"a.b":"1"}`, true},
		{"/a%2Eb=1", `{"a":{"b":"1"}}`, false},
		{"/a.b=1", `{"a.b":"1"}`, false},
		{"/a%3Db=1", `{"a=b":"1"}`, true},
		{"/a%2Fb=1", `{"a/b":"1"}`, true},
		{"/p=50%25", `{"p":"50%"}`, true},
		{"/path=%2Fhome%2Fx", `{"path":"/home/x"}`, true},
		{"/r=%2A", `{"r":"*"}`, true},
		{"/r=%2A", `{"r":"x"}`, false},
		{"/%2A", `{"*":1}`, true},
		{"/v=1.5.2", `{"v":"1.5.2"}`, true},

		// The value is everything after the first '='.
		{"/eq=a=b", `{"eq":"a=b"}`, true},
		{"/eq=a=b", `{"eq":"a"}`, false},
		{"/eq==", `{"eq":"="}`, true},

		// Segments are ANDed, in any order.
		{"/room=lobby/kind=chat", chat, true},
		{"/kind=chat/text=hi/room=lobby", chat, true},
		{"/kind=chat/text=bye", chat, false},
		{"/a=1/a=2", `{"a":"1"}`, false},

		// Non-object data never has keys.
		{"/a", `"a"`, false},
		{"/a", `3`, false},
		{"/a", `null`, false},
		{"/a", `true`, false},

		// Unicode keys and values.
		{"/名前=値", `{"名前":"値"}`, true},
	}
	for _, tt := range tests {
		for _, useNumber := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s on %.30s number=%v", tt.sel, tt.data, useNumber), func(t *testing.T) {
				sel := mustParseSelector(t, tt.sel)
				data := decodeSelectorData(t, tt.data, useNumber)
				require.Equal(t, tt.want, sel.Match(data))

				var idx selectorIndex[int]
				idx.Add(sel, 1)
				require.Equal(t, tt.want, len(idx.AppendMatches(nil, data)) == 1, "index")
			})
		}
	}
}

func TestSelectorMatchJSONNumberLiteral(t *testing.T) {
	// A json.Number is equal to its literal text and to its float64 text.
	const data = `{"id":12345678901234567891,"e":1e2,"z":3.0}`
	plain := decodeSelectorData(t, data, false)
	number := decodeSelectorData(t, data, true)
	tests := []struct {
		sel           string
		plain, number bool
	}{
		{"/id=12345678901234567891", false, true},
		{"/id=12345678901234567000", true, true},
		{"/e=100", true, true},
		{"/e=1e2", false, true},
		{"/z=3", true, true},
		{"/z=3.0", false, true},
	}
	for _, tt := range tests {
		sel := mustParseSelector(t, tt.sel)
		require.Equal(t, tt.plain, sel.Match(plain), "%s float64", tt.sel)
		require.Equal(t, tt.number, sel.Match(number), "%s json.Number", tt.sel)
		var idx selectorIndex[string]
		idx.Add(sel, tt.sel)
		require.Equal(t, tt.plain, len(idx.AppendMatches(nil, plain)) == 1, "%s index float64", tt.sel)
		require.Equal(t, tt.number, len(idx.AppendMatches(nil, number)) == 1, "%s index json.Number", tt.sel)
	}
}

func TestSelectorMatchOtherGoTypes(t *testing.T) {
	// Only the types encoding/json produces are walked or compared.
	require.False(t, mustParseSelector(t, "/n=3").Match(map[string]any{"n": 3}))
	require.False(t, mustParseSelector(t, "/a").Match(map[string]string{"a": "x"}))
	require.False(t, mustParseSelector(t, "/0").Match([]string{"x"}))
	require.True(t, mustParseSelector(t, "/a").Match(map[string]any{"a": struct{}{}}))
}

func TestSelectorZeroValue(t *testing.T) {
	var zero Selector
	require.Equal(t, "/", zero.String())
	require.Equal(t, "/", zero.Key())
	require.True(t, zero.MatchesAll())
	require.True(t, zero.Match(nil))
	require.True(t, zero.Match(map[string]any{"a": 1.0}))
	require.True(t, zero.Equal(mustParseSelector(t, "/")))
	require.True(t, zero.Equal(mustParseSelector(t, "/*")))
	require.False(t, mustParseSelector(t, "/a").MatchesAll())
	require.False(t, zero.Equal(mustParseSelector(t, "/a")))
}

func TestSelectorKeyAsMapKey(t *testing.T) {
	m := map[string]int{}
	for _, s := range []string{"/kind=chat/room=lobby", "/room=lobby/kind=chat", "/room=lobby/kind=chat/*", "/kind=chat/room=lobby/kind=chat"} {
		m[mustParseSelector(t, s).Key()]++
	}
	require.Equal(t, map[string]int{"/kind=chat/room=lobby": 4}, m)
	require.NotEqual(t, mustParseSelector(t, "/a.b").Key(), mustParseSelector(t, "/a%2Eb").Key())
}

func TestAppendJSONFloatMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 3, 2.5, 0.1, 1e-6, 1e-7, 9.999999e-7, 1e20, 1e21, 1e21 - 65536, 123456789, 1.7976931348623157e308, 5e-324, -1e-300, 12345678901234567891}
	for range 20000 {
		switch r.IntN(3) {
		case 0:
			floats = append(floats, math.Float64frombits(r.Uint64()))
		case 1:
			floats = append(floats, float64(r.Int64N(1<<60)-1<<59)/math.Pow(10, float64(r.IntN(30))))
		default:
			floats = append(floats, r.NormFloat64()*math.Pow(10, float64(r.IntN(60)-30)))
		}
	}
	for _, f := range floats {
		got, ok := appendJSONFloat(nil, f)
		want, err := json.Marshal(f)
		if err != nil {
			require.False(t, ok, "%v", f)
			continue
		}
		require.True(t, ok)
		require.Equal(t, string(want), string(got), "%v", f)
	}
}

func TestSelectorMatchDoesNotAllocate(t *testing.T) {
	sel := mustParseSelector(t, "/kind=chat/room=lobby/n=3/f=2.5/ok=true/nil/customer.tier=gold/items.1.sku=B2")
	data := decodeSelectorData(t, `{"kind":"chat","room":"lobby","n":3,"f":2.5,"ok":true,"nil":null,"customer":{"tier":"gold"},"items":[{"sku":"A1"},{"sku":"B2"}]}`, false)
	numbers := decodeSelectorData(t, `{"kind":"chat","room":"lobby","n":3.0,"f":2.5,"ok":true,"nil":null,"customer":{"tier":"gold"},"items":[{"sku":"A1"},{"sku":"B2"}]}`, true)
	require.True(t, sel.Match(data))
	require.True(t, sel.Match(numbers))
	require.Zero(t, testing.AllocsPerRun(100, func() { sel.Match(data) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { sel.Match(numbers) }))
}

func TestSelectorIndexAddRemove(t *testing.T) {
	var idx selectorIndex[string]
	all := mustParseSelector(t, "/")
	chat := mustParseSelector(t, "/kind=chat")
	lobby := mustParseSelector(t, "/kind=chat/room=lobby")
	lobby2 := mustParseSelector(t, "/room=lobby/kind=chat/*")
	hasRoom := mustParseSelector(t, "/room")
	data := decodeSelectorData(t, `{"kind":"chat","room":"lobby"}`, false)
	kitchen := decodeSelectorData(t, `{"kind":"chat","room":"kitchen"}`, false)

	matches := func(d any) []string {
		got := idx.AppendMatches(nil, d)
		slices.Sort(got)
		return got
	}

	require.Zero(t, idx.Len())
	require.Empty(t, matches(data))
	require.True(t, idx.Add(all, "all"))
	require.True(t, idx.Add(chat, "chat"))
	require.True(t, idx.Add(lobby, "lobby"))
	require.False(t, idx.Add(lobby2, "lobby"), "same canonical selector and value")
	require.True(t, idx.Add(hasRoom, "room"))
	require.True(t, idx.Add(hasRoom, "chat"), "one value under two selectors")
	require.Equal(t, 5, idx.Len())
	require.Equal(t, []string{"all", "chat", "chat", "lobby", "room"}, matches(data))
	require.Equal(t, []string{"all", "chat", "chat", "room"}, matches(kitchen))
	require.Equal(t, []string{"all"}, matches(nil))

	require.False(t, idx.Remove(lobby, "nobody"))
	require.False(t, idx.Remove(mustParseSelector(t, "/kind=mail"), "chat"))
	require.False(t, idx.Remove(mustParseSelector(t, "/kind=chat/room=lobby/x"), "lobby"))
	require.True(t, idx.Remove(lobby2, "lobby"))
	require.False(t, idx.Remove(lobby, "lobby"))
	require.Equal(t, []string{"all", "chat", "chat", "room"}, matches(data))
	require.True(t, idx.Remove(hasRoom, "chat"))
	require.True(t, idx.Remove(hasRoom, "room"))
	require.True(t, idx.Remove(chat, "chat"))
	require.True(t, idx.Remove(all, "all"))
	require.Zero(t, idx.Len())
	require.True(t, idx.root.empty(), "removing everything frees every node")
	require.Nil(t, idx.root.branches)
}

func TestNewSelectorIndex(t *testing.T) {
	idx := newSelectorIndex[*int]()
	one := new(int)
	require.True(t, idx.Add(mustParseSelector(t, "/a=1"), one))
	require.Equal(t, []*int{one}, idx.AppendMatches(nil, map[string]any{"a": 1.0}))
	require.Empty(t, idx.AppendMatches(nil, map[string]any{"a": 2.0}))
}

func TestSelectorIndexManyValuesAndKeys(t *testing.T) {
	// Past indexMapMin, values and branches are found by map; removal in
	// any order must keep those maps consistent.
	var idx selectorIndex[int]
	sels := make([]Selector, 40)
	for i := range sels {
		sels[i] = mustParseSelector(t, fmt.Sprintf("/k%d=v", i%20))
	}
	for i, s := range sels {
		for v := range 30 {
			require.True(t, idx.Add(s, i*100+v))
		}
	}
	require.Equal(t, 1200, idx.Len())
	r := rand.New(rand.NewPCG(3, 4))
	type pair struct{ s, v int }
	var pairs []pair
	for i := range sels {
		for v := range 30 {
			pairs = append(pairs, pair{i, i*100 + v})
		}
	}
	r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	data := map[string]any{}
	for i := range 20 {
		data[fmt.Sprintf("k%d", i)] = "v"
	}
	for n, p := range pairs {
		require.True(t, idx.Remove(sels[p.s], p.v))
		require.False(t, idx.Remove(sels[p.s], p.v))
		if n%97 == 0 {
			require.Len(t, idx.AppendMatches(nil, data), idx.Len())
		}
	}
	require.Zero(t, idx.Len())
	require.True(t, idx.root.empty())
}

// randSelectorText builds a selector text from a small vocabulary so that
// random data often matches it.
func randSelectorText(r *rand.Rand) string {
	keys := []string{"a", "b", "c", "0", "1", "a.b", "a.0", "b.c.d", "1.a", "a%2Eb"}
	vals := []string{"", "*", "x", "y", "1", "2.5", "true", "false", "null", "1e+21", "-0"}
	var b strings.Builder
	n := r.IntN(4)
	for range n {
		b.WriteByte('/')
		b.WriteString(keys[r.IntN(len(keys))])
		if r.IntN(3) > 0 {
			b.WriteByte('=')
			b.WriteString(vals[r.IntN(len(vals))])
		}
	}
	if n == 0 || r.IntN(8) == 0 {
		b.WriteString("/*")
		// As mesgd: whatever follows a '*' segment is ignored, even text
		// that would not parse on its own.
		for range r.IntN(3) {
			b.WriteByte('/')
			b.WriteString([]string{"a=x", "b", "*", "", "a..b", "%zz", "c=*"}[r.IntN(7)])
		}
	}
	return b.String()
}

// randSelectorData builds decoded JSON from the same vocabulary.
func randSelectorData(r *rand.Rand, depth int) any {
	switch k := r.IntN(10); {
	case depth > 0 && k < 4:
		m := map[string]any{}
		for range r.IntN(5) {
			m[[]string{"a", "b", "c", "d", "0", "1", "a.b"}[r.IntN(7)]] = randSelectorData(r, depth-1)
		}
		return m
	case depth > 0 && k < 6:
		a := make([]any, r.IntN(4))
		for i := range a {
			a[i] = randSelectorData(r, depth-1)
		}
		return a
	default:
		return []any{"x", "y", 1.0, 2.5, true, false, nil, 1e21, math.Copysign(0, -1), json.Number("1"), json.Number("1.0"), json.Number("-0")}[r.IntN(12)]
	}
}

func TestSelectorIndexMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 50 {
		var idx selectorIndex[int]
		sels := make([]Selector, 300)
		for i := range sels {
			sels[i] = mustParseSelector(t, randSelectorText(r))
			idx.Add(sels[i], i)
		}
		// Remove a third, so pruned paths are exercised too.
		live := make([]bool, len(sels))
		for i := range sels {
			live[i] = r.IntN(3) > 0
			if !live[i] {
				require.True(t, idx.Remove(sels[i], i))
			}
		}
		for range 200 {
			data := randSelectorData(r, 3)
			var want []int
			for i, s := range sels {
				if live[i] && s.Match(data) {
					want = append(want, i)
				}
			}
			got := idx.AppendMatches(nil, data)
			slices.Sort(got)
			require.Equal(t, want, got, "round %d data %#v", round, data)
		}
	}
}

func TestSelectorIndexMatchDoesNotAllocate(t *testing.T) {
	var idx selectorIndex[int]
	for i := range 1000 {
		idx.Add(mustParseSelector(t, fmt.Sprintf("/kind=chat/room=room-%d", i)), i)
		idx.Add(mustParseSelector(t, fmt.Sprintf("/n=%d", i)), i)
	}
	idx.Add(Selector{}, -1)
	data := decodeSelectorData(t, `{"kind":"chat","room":"room-7","n":7}`, false)
	dst := make([]int, 0, 16)
	count := 0
	fn := func(int) { count++ }
	require.Zero(t, testing.AllocsPerRun(100, func() { dst = idx.AppendMatches(dst[:0], data) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { idx.Match(data, fn) }))
	slices.Sort(dst)
	require.Equal(t, []int{-1, 7, 7}, dst)
}

func TestSelectorIndexConcurrentMatch(t *testing.T) {
	// Match only reads: many goroutines may match at once (run with -race).
	var idx selectorIndex[int]
	for i := range 100 {
		idx.Add(mustParseSelector(t, fmt.Sprintf("/kind=chat/room=room-%d", i)), i)
	}
	data := decodeSelectorData(t, `{"kind":"chat","room":"room-42"}`, false)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if got := idx.AppendMatches(nil, data); len(got) != 1 || got[0] != 42 {
					t.Errorf("got %v", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

func ExampleParseSelector() {
	sel, err := ParseSelector("/room=lobby/kind=chat")
	if err != nil {
		panic(err)
	}
	var data any
	_ = json.Unmarshal([]byte(`{"kind":"chat","room":"lobby","text":"hi"}`), &data)
	fmt.Println(sel, sel.Match(data))

	_, err = ParseSelector("/kind=chat//room=lobby")
	fmt.Println(ErrorCode(err), errors.Is(err, ErrInvalid))
	// Output:
	// /kind=chat/room=lobby true
	// SELECTOR_INVALID true
}

func TestSelectorIndexAppendMatches(t *testing.T) {
	var idx selectorIndex[string]
	for _, s := range []string{"/", "/kind=chat/room=lobby", "/kind=chat/room=kitchen"} {
		sel, _ := ParseSelector(s)
		idx.Add(sel, s)
	}
	var data any
	_ = json.Unmarshal([]byte(`{"kind":"chat","room":"lobby"}`), &data)
	got := idx.AppendMatches(nil, data)
	slices.Sort(got)
	require.Equal(t, []string{"/", "/kind=chat/room=lobby"}, got)
}
