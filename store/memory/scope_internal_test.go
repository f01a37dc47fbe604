package memory

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestKeyScopes: a key's bytes up to its second NUL are kept once in the
// store's table of scopes and each message keeps the rest of its key; keys
// without a scope, with one longer than maxScopeLen or past the table's
// bound are kept whole. Every key reads back whole (Read, Lookup, a
// duplicate's answer), deduplicates, and is found again after its message
// is trimmed.
func TestKeyScopes(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	long := strings.Repeat("s", maxScopeLen) + "\x00p\x00"
	for _, tc := range []struct {
		name   string
		keys   []string
		scoped bool // every key is kept as its scope and the rest
		full   bool // the table takes no scope
	}{
		{name: "broker scope", keys: []string{"a\x00svc\x00k1", "a\x00svc\x00k2", "a\x00other\x00k1", "a\x00svc\x00k3"}, scoped: true},
		{name: "rest empty", keys: []string{"a\x00svc\x00"}, scoped: true},
		{name: "rest holds NULs", keys: []string{"a\x00svc\x00k\x00\x00x", "a\x00svc\x00\x00"}, scoped: true},
		{name: "no NUL", keys: []string{"plain", "k1"}},
		{name: "one NUL", keys: []string{"a\x00k1", "\x00"}},
		{name: "scope too long", keys: []string{long + "k1", long + "k2"}},
		{name: "table full", keys: []string{"a\x00p1\x00k", "a\x00p2\x00k"}, full: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(nil)
			ctx := t.Context()
			if tc.full {
				s.msgs.scopes.max = 0
			}
			var arena int
			for i, key := range tc.keys {
				_, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: t0, IdemKey: key, IdemExpires: t0.Add(time.Hour), Body: []byte("x")})
				require.NoError(t, err)
				require.False(t, dup)
				kept := key
				if tc.scoped {
					kept = key[strings.IndexByte(key, 0)+1:]
					kept = kept[strings.IndexByte(kept, 0)+1:]
				}
				arena += len("m"+strconv.Itoa(i)) + len(kept) + len("x")
			}
			sl := s.msgs.subjects["a"]
			require.Equal(t, arena, len(sl.chunks[0].data), "each message keeps its id, the rest of its key and its body")

			got, err := s.Read(ctx, "a", 0, 0)
			require.NoError(t, err)
			for i, key := range tc.keys {
				id := "m" + strconv.Itoa(i)
				require.Equal(t, key, got[i].IdemKey)
				m, err := s.Lookup(ctx, id)
				require.NoError(t, err)
				require.Equal(t, key, m.IdemKey)
				orig, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "again", Time: t0, IdemKey: key, IdemExpires: t0.Add(time.Hour)})
				require.NoError(t, err)
				require.True(t, dup, "key %q", key)
				require.Equal(t, id, orig.ID)
				require.Equal(t, key, orig.IdemKey)
			}
			_, err = s.TrimBefore(ctx, "a", t0.Add(time.Second))
			require.NoError(t, err)
			for i, key := range tc.keys {
				orig, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "again", Time: t0, IdemKey: key, IdemExpires: t0.Add(time.Hour)})
				require.NoError(t, err)
				require.True(t, dup, "key %q after its message was trimmed", key)
				require.Equal(t, "m"+strconv.Itoa(i), orig.ID)
				require.Equal(t, key, orig.IdemKey)
			}
			_, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "new", Time: t0, IdemKey: tc.keys[0] + "!", IdemExpires: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.False(t, dup, "a key that only starts like another is its own")
		})
	}
}

// TestKeyScopesBound: the table takes at most max scopes; the keys of
// later ones are kept whole.
func TestKeyScopesBound(t *testing.T) {
	var sc keyScopes
	sc.init()
	sc.max = 2
	var last uint32
	for i, want := range []uint32{1, 2, 0, 1, 0, 2} {
		key := "s\x00p" + strconv.Itoa([]int{1, 2, 3, 1, 4, 2}[i]) + "\x00k"
		scope, rest := sc.split(key, &last)
		require.Equal(t, want, scope, "key %q", key)
		require.Equal(t, key, sc.strs[scope]+rest)
	}
	require.Len(t, sc.strs, 3)
}

// TestHashOfParts: a key hashed as its scope and its rest hashes as the
// whole key does, which is how the index found it.
func TestHashOfParts(t *testing.T) {
	h := newHasher()
	for _, key := range []string{"", "a", "a\x00p\x00k", strings.Repeat("x", 1000) + "\x00" + strings.Repeat("y", 300)} {
		for i := range len(key) + 1 {
			require.Equal(t, h.string(key), h.parts(key[:i], []byte(key[i:])), "key %q split at %d", key, i)
		}
	}
}
