package wal

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// The table against a reference multi-map, with few distinct hashes so
// that clusters, collisions and wrap-around are common.
func TestIDTable(t *testing.T) {
	var tab idTable
	ref := map[uint64][]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 100000 {
		h := r.Uint64N(3000) * 0x9E3779B97F4A7C15 // few distinct hashes, spread out
		if h == 0 {
			h = ^uint64(0) // homes to the last slot: clusters wrap around
		}
		if r.IntN(3) > 0 || len(ref[h]) == 0 {
			loc := uint64(i)
			tab.Insert(h, loc)
			ref[h] = append(ref[h], loc)
		} else {
			locs := ref[h]
			k := r.IntN(len(locs))
			tab.remove(h, locs[k])
			ref[h] = slices.Delete(locs, k, k+1)
		}
		if i%997 == 0 {
			for h, want := range ref {
				got := tab.find(h)
				slices.Sort(got)
				w := slices.Clone(want)
				slices.Sort(w)
				if len(w) == 0 {
					w = nil
				}
				require.Equal(t, w, got, "hash %d after %d steps", h, i)
			}
		}
	}
	n := 0
	for _, l := range ref {
		n += len(l)
	}
	require.Equal(t, n, tab.Len())
	tab.remove(12345678, 1) // absent: no-op
	require.Equal(t, n, tab.Len())
}

// Messages without an id are not in the id index: Lookup("") finds none
// (as in the memory store), and, all of one hash, they would otherwise
// pile into one probe run that every later insert near it walks, so that
// appending n of them cost O(n²). After a reopen too.
func TestEmptyIDNotIndexed(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := open(t, dir, fast)
	for i := range 300 {
		_, _, err := s.Append(ctx, msg("a", "", at(time.Duration(i))))
		require.NoError(t, err)
	}
	_, _, err := s.Append(ctx, msg("a", "x", at(time.Second)))
	require.NoError(t, err)
	check := func(s *Store) {
		t.Helper()
		_, err := s.Lookup(ctx, "")
		require.ErrorIs(t, err, store.ErrNotFound)
		m, err := s.Lookup(ctx, "x")
		require.NoError(t, err)
		require.Equal(t, uint64(301), m.Seq)
		s.msgs.idx.mu.Lock()
		defer s.msgs.idx.mu.Unlock()
		require.Equal(t, 1, s.msgs.idx.ids.Len(), "only the message with an id is indexed")
	}
	check(s)
	n, err := s.TrimThrough(ctx, "a", 10)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	check(s)
	require.NoError(t, s.Close(ctx))
	check(open(t, dir, fast))
}

// A subject whose directory already holds another subject's log (as
// "Orders" and "orders" share one on a file system that folds case) is
// refused, rather than opening a second log on the other's files.
func TestSubjectDirectoryOfAnotherSubject(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := open(t, dir, fast)
	_, _, err := s.Append(ctx, msg("orders", "o1", at(0)))
	require.NoError(t, err)
	// What a case-folding file system does: "Orders" finds "orders".
	require.NoError(t, os.Symlink(subjectDir("orders"), filepath.Join(s.messagesDir(), subjectDir("Orders"))))
	_, _, err = s.Append(ctx, msg("Orders", "O1", at(time.Second)))
	require.ErrorContains(t, err, `holds subject "orders"`)
	got, err := s.Read(ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "o1", got[0].ID)
	require.NoError(t, os.Remove(filepath.Join(s.messagesDir(), subjectDir("Orders"))))
	require.NoError(t, s.Close(ctx))
	s = open(t, dir, fast)
	got, err = s.Read(ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
}
