package wal

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordDirSyncs records the directories syncDir fsyncs until the test
// ends.
func recordDirSyncs(t *testing.T) func() map[string]bool {
	var mu sync.Mutex
	synced := map[string]bool{}
	dirSynced = func(dir string) {
		mu.Lock()
		synced[dir] = true
		mu.Unlock()
	}
	t.Cleanup(func() { dirSynced = nil })
	return func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for d := range synced {
			out[d] = true
		}
		return out
	}
}

// A directory's name is durable only once its parent is fsynced. Before,
// the data directory Open created (and any missing ancestor) was never
// synced into its parent, nor messages/ into the data directory when it
// was the only directory created: a power loss could lose the whole
// store, every acknowledged write in it, though each segment was fsynced.
func TestCreatedDirectoriesAreSyncedIntoTheirParents(t *testing.T) {
	t.Run("data directory and its missing ancestors", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "a", "b")
		synced := recordDirSyncs(t)
		s := open(t, dir, nil)
		appendN(t, s, "x", 1, 1)
		got := synced()
		for _, d := range []string{root, filepath.Join(root, "a"), dir, filepath.Join(dir, "messages")} {
			require.True(t, got[d], "%s was not fsynced after an entry was created in it", d)
		}
	})
	t.Run("messages directory created alone", func(t *testing.T) {
		s := open(t, t.TempDir(), nil)
		dir := crashCopy(t, s) // no CLEAN: nothing else syncs the data directory
		require.NoError(t, s.Close(t.Context()))
		require.NoError(t, os.RemoveAll(filepath.Join(dir, "messages")))
		synced := recordDirSyncs(t)
		open(t, dir, nil)
		require.True(t, synced()[dir], "messages/ was created but the data directory not fsynced")
	})
}
