package storetest

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// testSwap holds a store.KVSwapper to its contract: a swap is made only
// if the key holds the old value (nil: none), byte for byte, and of
// swaps racing from one old value exactly one is made. A durable store
// keeps what the swaps made, and only that, across a reopen.
func (su *suite) testSwap(t *testing.T) {
	s := su.store(t)
	sw, ok := s.(store.KVSwapper)
	if !ok {
		t.Skip("the store cannot swap a value")
	}
	ctx := t.Context()
	requireValue := func(t *testing.T, s store.Store, key, want string) {
		t.Helper()
		got, err := s.Get(ctx, "accounts", key)
		require.NoError(t, err, "Get %s", key)
		require.Equal(t, want, string(got), "Get %s", key)
	}
	requireNone := func(t *testing.T, s store.Store, key string) {
		t.Helper()
		_, err := s.Get(ctx, "accounts", key)
		require.ErrorIs(t, err, store.ErrNotFound, "Get %s", key)
	}

	t.Run("Cases", func(t *testing.T) {
		// Each case starts from alice holding "v1" and nobody else
		// holding anything; key is the key swapped.
		for _, tc := range []struct {
			name     string
			key      string
			old, val []byte
			made     bool
		}{
			{"a value swapped from the value it holds", "alice", []byte("v1"), []byte("v2"), true},
			{"a value swapped from another value", "alice", []byte("v0"), []byte("v2"), false},
			{"a value swapped from a prefix of its value", "alice", []byte("v"), []byte("v2"), false},
			{"a value swapped from none", "alice", nil, []byte("v2"), false},
			{"a value swapped from the empty value", "alice", []byte{}, []byte("v2"), false},
			{"a value deleted from the value it holds", "alice", []byte("v1"), nil, true},
			{"a value deleted from another value", "alice", []byte("v0"), nil, false},
			{"a missing key created", "bob", nil, []byte("b1"), true},
			{"a missing key swapped from a value", "bob", []byte("b0"), []byte("b1"), false},
			{"a missing key swapped from the empty value", "bob", []byte{}, []byte("b1"), false},
			{"a missing key deleted from none", "bob", nil, nil, true},
			{"a value stored empty", "alice", []byte("v1"), []byte{}, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := su.store(t)
				sw := s.(store.KVSwapper)
				require.NoError(t, s.Put(ctx, "accounts", "alice", []byte("v1")))
				err := sw.Swap(ctx, "accounts", tc.key, tc.old, tc.val)
				want := map[string][]byte{"alice": []byte("v1")}
				if tc.made {
					require.NoError(t, err)
					if tc.val == nil {
						delete(want, tc.key)
					} else {
						want[tc.key] = tc.val
					}
				} else {
					require.ErrorIs(t, err, store.ErrChanged)
				}
				got, err := s.List(ctx, "accounts")
				require.NoError(t, err)
				require.Equal(t, normKV(want), normKV(got))
				if _, ok := want["bob"]; !ok {
					requireNone(t, s, "bob")
				}
			})
		}
	})

	t.Run("Sequence", func(t *testing.T) {
		require.NoError(t, sw.Swap(ctx, "accounts", "carol", nil, []byte("c1")))
		require.ErrorIs(t, sw.Swap(ctx, "accounts", "carol", nil, []byte("c1")), store.ErrChanged, "created twice")
		require.NoError(t, sw.Swap(ctx, "accounts", "carol", []byte("c1"), []byte("c2")))
		require.ErrorIs(t, sw.Swap(ctx, "accounts", "carol", []byte("c1"), []byte("c3")), store.ErrChanged, "swapped from what was read before the last swap")
		requireValue(t, s, "carol", "c2")
		require.NoError(t, sw.Swap(ctx, "accounts", "carol", []byte("c2"), nil))
		requireNone(t, s, "carol")
		require.ErrorIs(t, sw.Swap(ctx, "accounts", "carol", []byte("c2"), []byte("c4")), store.ErrChanged, "a deleted key was swapped as if it held its last value")
		require.NoError(t, sw.Swap(ctx, "accounts", "carol", nil, []byte("c5")), "a deleted key has no value")
		requireValue(t, s, "carol", "c5")
		require.NoError(t, s.Put(ctx, "accounts", "carol", []byte("c2")))
		require.NoError(t, sw.Swap(ctx, "accounts", "carol", []byte("c2"), []byte("c6")), "a key put back to the value read holds it")
		requireValue(t, s, "carol", "c6")
		require.NoError(t, s.Delete(ctx, "accounts", "carol"))
		require.ErrorIs(t, sw.Swap(ctx, "accounts", "carol", []byte("c6"), nil), store.ErrChanged)
		require.NoError(t, sw.Swap(ctx, "roles", "carol", nil, []byte("r1")), "buckets are apart")
		requireNone(t, s, "carol")
		if su.f.Reopen != nil {
			s := su.reopen(t, s)
			requireNone(t, s, "carol")
			got, err := s.Get(ctx, "roles", "carol")
			require.NoError(t, err)
			require.Equal(t, "r1", string(got))
			require.ErrorIs(t, s.(store.KVSwapper).Swap(ctx, "roles", "carol", nil, []byte("r2")), store.ErrChanged, "after a reopen")
		}
	})

	t.Run("Racing", func(t *testing.T) {
		// Swaps racing from one old value: exactly one is made, whatever
		// the old value (none, or a value), and the value stored is the
		// one that was made, also after a reopen.
		s := su.store(t)
		sw := s.(store.KVSwapper)
		const racers = 8
		for _, old := range [][]byte{nil, []byte("v0")} {
			key := "none"
			if old != nil {
				key = "some"
				require.NoError(t, s.Put(ctx, "accounts", key, old))
			}
			var wg sync.WaitGroup
			errs := make([]error, racers)
			for i := range racers {
				wg.Go(func() { errs[i] = sw.Swap(ctx, "accounts", key, old, []byte{'w', byte('0' + i)}) })
			}
			wg.Wait()
			winner := -1
			for i, err := range errs {
				if err == nil {
					require.Equal(t, -1, winner, "two swaps from one value were made: %d and %d", winner, i)
					winner = i
					continue
				}
				require.ErrorIs(t, err, store.ErrChanged)
			}
			require.NotEqual(t, -1, winner, "no swap was made")
			requireValue(t, s, key, string([]byte{'w', byte('0' + winner)}))
		}
		if su.f.Reopen != nil {
			before, err := s.List(ctx, "accounts")
			require.NoError(t, err)
			s = su.reopen(t, s)
			after, err := s.List(ctx, "accounts")
			require.NoError(t, err)
			require.Equal(t, normKV(before), normKV(after), "a reopen replayed a swap that was not made")
		}
	})
}
