package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store/wal"
)

// Programs and their versions are kept in the store: a broker started
// again on it binds every program at its last version.
func TestRestartRebinds(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() *fixture {
		st, err := wal.Open(dir, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close(ctx) })
		return newFixture(t, st)
	}
	f := open()
	enrich := manifest(func(m *programs.Manifest) {
		m.Route.Group = "enrich"
		m.Env = map[string]string{"ENRICH_FIELD": "seen", "ENRICH_VALUE": "yes", "ENRICH_TO": "orders.out"}
	})
	_, err := f.mg.Deploy(ctx, admin, "ok", manifest(group("ok")), modOK)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "enricher", enrich, modOK)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "enricher", enrich, example(t, "enricher"))
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "gone", manifest(group("gone")), modOK)
	require.NoError(t, err)
	require.NoError(t, f.mg.Remove(ctx, admin, "gone"))
	require.Len(t, f.audited(t, pigeon.EventProgramRemoved), 1)
	f.stop(t)
	require.NoError(t, f.st.Close(ctx))

	f = open()
	list := f.mg.List(ctx)
	require.Len(t, list, 2)
	for _, in := range list {
		require.True(t, in.Bound, in.Name)
	}
	require.Equal(t, 2, list[0].Version, "enricher at its last version")
	require.Len(t, f.audited(t, pigeon.EventProgramBound), 2)
	out := f.collect(t, "orders.out")
	f.publish(t, "orders.in", `{"n":1}`)
	require.JSONEq(t, `{"n":1,"seen":"yes"}`, string(next(t, out).Data))
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 2 }, "both programs handle the message")
	_, err = f.mg.Get(ctx, "gone")
	require.ErrorIs(t, err, pigeon.ErrNotFound)
}
