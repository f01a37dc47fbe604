package jsontext

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDepth(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{``, 0}, {`1`, 0}, {`"[[["`, 0}, {`{}`, 1}, {`[[]]`, 2}, {`{"a":[{"b":"]]"}]}`, 3},
		{`["\"[",[1]]`, 2}, {`[1],[[2]]`, 2}, {strings.Repeat("[", 70) + strings.Repeat("]", 70), 70},
	} {
		require.Equal(t, tc.want, Depth([]byte(tc.in)), "%s", tc.in)
	}
}

// FuzzDepth: on every text Validate accepts with a bound, Depth is within
// it, and a text Validate refuses as too deep is deeper than the bound.
func FuzzDepth(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":[]}]}`, `[[[[]]]]`, `"x"`, `{"a":"[\"{"}`} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = 1 + abs(limit)%8
		err := Validate(b, limit)
		if err == nil {
			require.LessOrEqual(t, Depth(b), limit)
		}
		if e, ok := err.(*Error); ok && e.Kind == KindTooDeep {
			require.Greater(t, Depth(b), limit)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
