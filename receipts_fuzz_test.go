package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// FuzzSeqsContain: the Seqs of a batch record come from the audit log,
// which pigeon audit receipts reads from files. Whatever the text,
// WalkSeqs yields ascending, disjoint ranges of positive sequences, and
// SeqsContain agrees with a plain search of every range WalkSeqs yields
// (what it reads up to a fault).
func FuzzSeqsContain(f *testing.F) {
	for _, s := range []string{"", "4", "4-9,12", "1-3,2", "0", "9-4", "4,", ",4", "18446744073709551615", "1-18446744073709551616", "7--9", "3,5-5,6"} {
		f.Add(s, uint64(4))
	}
	f.Fuzz(func(t *testing.T, seqs string, q uint64) {
		var ranges [][2]uint64
		store.WalkSeqs(seqs, func(lo, hi uint64) bool {
			ranges = append(ranges, [2]uint64{lo, hi})
			return true
		})
		want := false
		for i, r := range ranges {
			require.Positive(t, r[0])
			require.LessOrEqual(t, r[0], r[1])
			if i > 0 {
				require.Greater(t, r[0], ranges[i-1][1], "ascending and disjoint")
			}
			want = want || (r[0] <= q && q <= r[1])
		}
		require.Equal(t, want, pigeon.SeqsContain(seqs, q), "%q contains %d", seqs, q)
		for _, r := range ranges { // the ends, and just past them
			for _, p := range []uint64{r[0], r[1], r[0] - 1, r[1] + 1} {
				in := false
				for _, r := range ranges {
					in = in || (r[0] <= p && p <= r[1])
				}
				require.Equal(t, in, pigeon.SeqsContain(seqs, p), "%q contains %d", seqs, p)
			}
		}
	})
}
