package jsontext

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBoxedValuesSurviveCollection: values boxed from a document's slabs
// stay intact, and behave as ordinary interface values (type switches,
// comparison, map keys, encoding), after the rest of the document is
// dropped, the heap is churned and collected, across more values than
// one chunk holds.
func TestBoxedValuesSurviveCollection(t *testing.T) {
	const n = 3 * maxChunk
	var doc strings.Builder
	doc.WriteString("[")
	for i := range n {
		if i > 0 {
			doc.WriteString(",")
		}
		fmt.Fprintf(&doc, `"s%d",%d.5`, i, i)
	}
	doc.WriteString("]")
	v, err := decode([]byte(doc.String()))
	require.NoError(t, err)
	all := v.([]any)
	require.Len(t, all, 2*n)
	// Keep every 97th value only.
	var kept []any
	for i := 0; i < len(all); i += 97 {
		kept = append(kept, all[i])
	}
	all, v = nil, nil
	for range 3 {
		garbage := make([][]byte, 0, 1024)
		for range 1024 {
			garbage = append(garbage, make([]byte, 256))
		}
		runtime.GC()
		runtime.KeepAlive(garbage)
	}
	seen := map[any]int{}
	for k, x := range kept {
		i := k * 97
		switch x := x.(type) {
		case string:
			require.Equal(t, fmt.Sprintf("s%d", i/2), x)
			require.True(t, x == fmt.Sprintf("s%d", i/2))
		case float64:
			require.Equal(t, float64(i/2)+0.5, x)
		default:
			t.Fatalf("value %d is a %T", i, x)
		}
		seen[x]++
		require.Equal(t, 1, seen[x], "an interface value hashes as its content")
	}
	b, err := json.Marshal(kept)
	require.NoError(t, err)
	var again []any
	require.NoError(t, json.Unmarshal(b, &again))
	require.Equal(t, again, kept)
}

// TestChunkSizes: the first string chunk follows the document's size, the
// others double, all within [minChunk, maxChunk].
func TestChunkSizes(t *testing.T) {
	tests := []struct{ prev, first, want int }{
		{0, 0, minChunk}, {0, 10, 10}, {0, 100000, maxChunk}, {4, 10, 8}, {200, 0, maxChunk}, {maxChunk, 0, maxChunk},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, nextChunk(tc.prev, tc.first), "prev %d first %d", tc.prev, tc.first)
	}
}
