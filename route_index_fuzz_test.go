package pigeon

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/jsontext"
)

// FuzzSelectorIndexAgreesWithMatch is the differential test of the fan-out
// against the selectors it routes by: with many selectors in one index
// (shared prefixes, one value under several selectors, some removed), the
// index passes a value exactly once per live selector of it whose Match
// holds, for data decoded as the broker decodes a stored message's
// (decoded.value) and as encoding/json decodes it with UseNumber. A live
// subscriber is routed by the index, a lagging one by Match: they must
// get the same messages.
func FuzzSelectorIndexAgreesWithMatch(f *testing.F) {
	seeds := []struct {
		sels   string
		remove uint64
		data   string
	}{
		{"/kind=chat\n/kind=chat/room=lobby\n/kind\n/\n/room=lobby", 0, `{"kind":"chat","room":"lobby"}`},
		{"/a=1\n/a=1.0\n/a=1e0\n/a\n/a=true", 2, `{"a":1}`},
		{"/a%2Fb=x%3Dy\n/a%2fb=x=y\n/a%2Fb\n/a%252Fb=x", 0, `{"a/b":"x=y","a%2Fb":"x"}`},
		{"/a%2Eb=1\n/a.b=1\n/a.b\n/a%2Eb", 1, `{"a.b":1,"a":{"b":1}}`},
		{"/r=%2A\n/r=*\n/r=\n/r", 0, `{"r":"*"}`},
		{"/r=\n/r=%25\n/r=%2525", 0, `{"r":"%"}`},
		{"/n=caf\u00e9\n/n=cafe\u0301\n/n", 0, `{"n":"café"}`},
		{"/n=caf\u00e9\n/n=cafe\u0301", 0, `{"n":"cafe\u0301"}`},
		{"/0=x\n/0.0=y\n/1\n/0", 0, `[["y"],"z"]`},
		{"/0=x\n/0\n/1", 0, `{"0":"x"}`},
		{"/id=9007199254740993\n/id=9007199254740992\n/id", 0, `{"id":9007199254740993}`},
		{"/z=-0\n/z=0\n/z", 0, `{"z":-0}`},
		{"/b=1e+21\n/b=1000000000000000000000\n/t=1e-7\n/t=0.0000001", 0, `{"b":1e21,"t":1e-7}`},
		{"/a=x/b=y\n/b=y/a=x\n/a=x/*/c\n/a=x/b\n/a/b=y", 4, `{"a":"x","b":"y"}`},
		{"/a=null\n/a=\n/a", 0, `{"a":null}`},
		{"/a.b.c=1\n/a.b\n/a", 0, `{"a":{"b":[1]}}`},
	}
	for _, s := range seeds {
		f.Add(s.sels, s.remove, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, text string, remove uint64, data []byte) {
		lines := strings.Split(text, "\n")
		if len(lines) > 64 {
			lines = lines[:64]
		}
		var idx selectorIndex[int]
		type entry struct {
			sel  Selector
			v    int
			live bool
		}
		var entries []entry
		for i, line := range lines {
			sel, err := ParseSelector(line)
			if err != nil {
				continue
			}
			entries = append(entries, entry{sel, i, true})
			// One value under several selectors: it is passed once per
			// matching selector.
			if i%3 == 0 {
				entries = append(entries, entry{sel, -1, true})
			}
		}
		for i := range entries {
			en := &entries[i]
			added := idx.Add(en.sel, en.v)
			dup := slices.ContainsFunc(entries[:i], func(o entry) bool { return o.live && o.v == en.v && o.sel.Equal(en.sel) })
			require.Equal(t, !dup, added, "Add(%q, %d)", en.sel, en.v)
			if dup {
				en.live = false // the earlier entry stands for it
			}
		}
		for i := range entries {
			en := &entries[i]
			if en.live && remove&(1<<(i%64)) != 0 {
				require.True(t, idx.Remove(en.sel, en.v), "Remove(%q, %d)", en.sel, en.v)
				en.live = false
			}
		}
		var values []any
		if doc, err := jsontext.DecodeDocument(data, MaxJSONDepth, nil); err == nil {
			values = append(values, doc.Value)
		}
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		var v any
		if d.Decode(&v) == nil {
			values = append(values, v)
		}
		values = append(values, nil)
		for _, v := range values {
			var want []int
			for _, en := range entries {
				if en.live && en.sel.Match(v) {
					want = append(want, en.v)
				}
			}
			got := idx.AppendMatches(nil, v)
			slices.Sort(want)
			slices.Sort(got)
			require.Equal(t, want, got, "selectors %q, data %q (%#v)", lines, data, v)
		}
		for _, en := range entries {
			if en.live {
				require.True(t, idx.Remove(en.sel, en.v))
			}
		}
		require.Zero(t, idx.Len())
		require.True(t, idx.root.empty())
	})
}
