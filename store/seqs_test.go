package store_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

func TestSeqs(t *testing.T) {
	for _, tc := range []struct {
		seqs string
		n    uint64
		ok   bool
		in   []uint64
		out  []uint64
	}{
		{"7", 1, true, []uint64{7}, []uint64{6, 8}},
		{"4-9,12", 7, true, []uint64{4, 6, 9, 12}, []uint64{3, 10, 11, 13}},
		{"1-1,3-4", 3, true, []uint64{1, 3, 4}, []uint64{2, 5}},
		{"", 0, false, nil, []uint64{1}},
		{"0", 0, false, nil, []uint64{0}},
		{"5-4", 0, false, nil, []uint64{4, 5}},
		{"4-9,9", 0, false, []uint64{4}, []uint64{10}},
		{"9,4", 0, false, []uint64{9}, []uint64{4}},
		{"3,", 0, false, nil, []uint64{4}},
		{"a-b", 0, false, nil, []uint64{1}},
		{"1-18446744073709551616", 0, false, nil, []uint64{1}},
		{"-3", 0, false, nil, []uint64{3}},
	} {
		t.Run(tc.seqs, func(t *testing.T) {
			n, ok := store.CountSeqs(tc.seqs)
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, tc.n, n)
			}
			for _, q := range tc.in {
				require.True(t, pigeon.SeqsContain(tc.seqs, q), "%d", q)
			}
			for _, q := range tc.out {
				require.False(t, pigeon.SeqsContain(tc.seqs, q), "%d", q)
			}
		})
	}
}
