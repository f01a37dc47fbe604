package programs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store/wal"
)

// A stored program is bound again only under the manifest checks a deploy
// passes today: a record written by an older version, with bounds since
// lowered, or a record changed in the store, was bound as it was, its
// limits unchecked (a memory limit beyond MaxMemoryPages, more emits than
// MaxEmitsLimit, an empty account). It is refused, audited, and listed
// with its error, as a module that no longer compiles is.
func TestRestoreChecksTheStoredManifest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(m map[string]any)
	}{
		{"memory beyond the maximum", func(m map[string]any) {
			m["limits"].(map[string]any)["memoryPages"] = programs.MaxMemoryPages + 1
		}},
		{"emits beyond the maximum", func(m map[string]any) {
			m["limits"].(map[string]any)["maxEmits"] = programs.MaxEmitsLimit + 1
		}},
		{"no account", func(m map[string]any) { m["account"] = "" }},
		{"an empty subject to publish to", func(m map[string]any) { m["publishes"] = []string{""} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := restartedWithRecord(t, func(rec map[string]any) { tc.change(rec["manifest"].(map[string]any)) })
			in, err := f.mg.Get(context.Background(), "ok")
			require.NoError(t, err)
			require.False(t, in.Bound, "bound with a manifest a deploy refuses")
			require.Contains(t, in.Error, "PROGRAM_INVALID")
			require.Len(t, f.audited(t, pigeon.EventProgramRefused), 1)
		})
	}
}

// restartedWithRecord deploys program "ok" on a wal store, stops, changes
// its stored record with change (the record as decoded JSON), and returns
// the fixture of the store opened again: the program restored from the
// changed record.
func restartedWithRecord(t *testing.T, change func(rec map[string]any)) *fixture {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	open := func() (*fixture, *wal.Store) {
		st, err := wal.Open(dir, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close(ctx) })
		return newFixture(t, st), st
	}
	f, st := open()
	_, err := f.mg.Deploy(ctx, admin, "ok", manifest(group("ok")), modOK)
	require.NoError(t, err)
	f.stop(t)
	raw, err := st.Get(ctx, "programs", "ok")
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(raw, &rec))
	change(rec)
	raw, err = json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, "programs", "ok", raw))
	require.NoError(t, st.Close(ctx))
	f, _ = open()
	return f
}
