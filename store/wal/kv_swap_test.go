package wal

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestSwapDecidedWhereApplied: two swaps from one value both pass Swap's
// look before either commits (here, two records from one old value in
// one write): the first applied is made, the second finds the key changed
// and makes nothing, when they commit and when Open replays them, from
// the log alone or after a snapshot that holds the old value.
func TestSwapDecidedWhereApplied(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool // the old value compacted into meta.snapshot
	}{{"log", false}, {"snapshot then log", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			s, err := Open(dir, nil)
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, "accounts", "carol", []byte("v0")))
			if tc.snapshot {
				require.NoError(t, s.compactMeta())
			}
			made, err := s.metaWrite(
				encodeKVSwap("accounts", "carol", []byte("v0"), []byte("first")),
				encodeKVSwap("accounts", "carol", []byte("v0"), []byte("second")),
				encodeKVSwap("accounts", "dave", nil, []byte("d1")),
				encodeKVSwap("accounts", "dave", nil, nil), // dave has a value now
				encodeKVSwap("accounts", "erin", []byte("e0"), nil),
			)
			require.NoError(t, err)
			require.Equal(t, 2, made, "the first swap of carol and dave's create; the others find their key changed")

			requireKV := func(s *Store, msg string) {
				t.Helper()
				got, err := s.List(ctx, "accounts")
				require.NoError(t, err)
				require.Equal(t, map[string][]byte{"carol": []byte("first"), "dave": []byte("d1")}, got, msg)
			}
			requireKV(s, "as committed")
			require.ErrorIs(t, s.Swap(ctx, "accounts", "carol", []byte("v0"), []byte("third")), store.ErrChanged)
			require.NoError(t, s.Close(ctx))
			s, err = Open(dir, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close(ctx)) }()
			requireKV(s, "as replayed")
		})
	}
}
