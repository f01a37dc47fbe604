package firstn

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeeperKeepsTheLeast: whatever the order values are offered in, a
// Keeper of n returns the n least, sorted, as sorting them all would;
// n <= 0 keeps none, and n beyond the values offered keeps them all.
func TestKeeperKeepsTheLeast(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name     string
		values   int
		n        int
		distinct bool
	}{
		{"none offered", 0, 5, true},
		{"n of 0", 100, 0, true},
		{"negative n", 100, -1, true},
		{"one", 100, 1, true},
		{"a page of many", 5000, 37, true},
		{"more room than values", 20, 50, true},
		{"exactly as many", 64, 64, true},
		{"repeated values", 2000, 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := make([]int, tc.values)
			for i := range vs {
				if tc.distinct {
					vs[i] = i
				} else {
					vs[i] = rng.IntN(50)
				}
			}
			rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
			k := New(tc.n, cmp.Compare[int])
			for _, v := range vs {
				k.Offer(v)
				require.LessOrEqual(t, k.Len(), max(tc.n, 0), "never more than n held")
			}
			want := slices.Sorted(slices.Values(vs))
			want = want[:min(max(tc.n, 0), len(want))]
			got := k.Sorted()
			require.Equal(t, len(want), len(got))
			if len(want) > 0 {
				require.Equal(t, want, got)
			}
			require.Zero(t, k.Len(), "spent once sorted")
		})
	}
}
