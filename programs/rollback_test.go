package programs_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// The modules of the last KeepVersions versions are kept: a rollback
// deploys one of them again, with its manifest, as the next version; an
// older one is refused as pruned, its metadata kept. Rollbacks survive a
// restart of the Manager; a removal drops the kept modules.
func TestRollback(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	opts := &programs.Options{KV: f.st, Cache: cache, KeepVersions: 3}
	mg, err := programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })

	_, err = mg.Rollback(ctx, admin, "p", 0)
	require.ErrorIs(t, err, pigeon.ErrNotFound)
	mods := [][]byte{modOK, modLog, modFail, modOK}
	var sums []string
	for i, mod := range mods {
		in, err := mg.Deploy(ctx, admin, "p", manifest(func(m *programs.Manifest) { m.Route.MaxInFlight = i + 1 }), mod)
		require.NoError(t, err)
		sums = append(sums, in.SHA256)
	}
	_, err = mg.Rollback(ctx, admin, "p", 4)
	require.Equal(t, pigeon.CodeInvalidArgument, pigeon.ErrorCode(err), "the current version")
	_, err = mg.Rollback(ctx, admin, "p", 9)
	require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err))
	_, err = mg.Rollback(ctx, admin, "p", 1)
	require.Equal(t, pigeon.CodeProgramVersionPruned, pigeon.ErrorCode(err), "only 2, 3 and 4 keep their module")
	require.ErrorIs(t, err, pigeon.ErrNotFound)

	in, err := mg.Rollback(ctx, admin, "p", 0)
	require.NoError(t, err, "the version before the current one")
	require.Equal(t, 5, in.Version)
	require.Equal(t, 3, in.RollbackOf)
	require.Equal(t, sums[2], in.SHA256)
	require.Equal(t, 3, in.Manifest.Route.MaxInFlight, "with its manifest")
	require.True(t, in.Bound)
	require.Len(t, f.audited(t, pigeon.EventProgramRolledBack), 1)
	_, err = mg.Rollback(ctx, admin, "p", 2)
	require.Equal(t, pigeon.CodeProgramVersionPruned, pigeon.ErrorCode(err), "pruned by the rollback's own version")
	require.Equal(t, []string{"p@3", "p@4"}, kept(t, f), "the modules of the last versions but the current")

	require.NoError(t, mg.Close(ctx))
	mg, err = programs.New(ctx, f.e, opts)
	require.NoError(t, err)
	in, err = mg.Rollback(ctx, admin, "p", 4)
	require.NoError(t, err, "after a restart")
	require.Equal(t, sums[3], in.SHA256)
	require.Len(t, in.History, 5)
	for _, r := range in.History {
		require.Equal(t, r.Version < 4, r.Pruned, "version %d", r.Version)
		require.NotNil(t, r.Manifest)
	}
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the rolled-back version runs")

	require.NoError(t, mg.Remove(ctx, admin, "p"))
	require.Empty(t, kept(t, f), "a removal drops the kept modules")
}

// kept lists the keys of the kept modules.
func kept(t *testing.T, f *fixture) []string {
	t.Helper()
	m, err := f.st.List(context.Background(), "program-modules")
	require.NoError(t, err)
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// POST /v1/programs/{name}/rollback, for the roles of a deploy.
func TestRollbackOverHTTP(t *testing.T) {
	f := newFixture(t, nil)
	base := f.serve(t)
	deploy := func(token, name, account string, mod []byte) {
		st, body := call(t, http.MethodPut, base+"/v1/programs/"+name, token,
			map[string]any{"manifest": map[string]any{"route": map[string]any{"subject": "orders.in", "group": name}, "account": account}, "module": mod})
		require.Less(t, st, 300, "%v", body)
	}
	deploy("admin-token", "mine", progAcc, modOK)
	deploy("admin-token", "mine", other, modLog)
	deploy("admin-token", "mine", progAcc, modOK)
	st, body := call(t, http.MethodPost, base+"/v1/programs/mine/rollback", "deployer-token", nil)
	require.Equal(t, http.StatusNotFound, st, "version 2 ran as another account, hidden from the deployer: %v", body)
	require.Equal(t, string(pigeon.CodeProgramNotFound), errCode(body))
	st, body = call(t, http.MethodPost, base+"/v1/programs/mine/rollback", "client-token", nil)
	require.Equal(t, http.StatusForbidden, st, "%v", body)
	// Both refusals are audited: the deployer's by the handler (a version
	// of another account's), the client's by the route (no role).
	recs, err := f.e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var denied []string
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccessDenied) {
			denied = append(denied, rec.Principal+" "+rec.Ref)
		}
	}
	require.Equal(t, []string{progAcc + " POST /v1/programs/{name}/rollback", client + " POST /v1/programs/{name}/rollback"}, denied)
	st, body = call(t, http.MethodPost, base+"/v1/programs/mine/rollback", "deployer-token", map[string]int{"version": 1})
	require.Equal(t, http.StatusOK, st, "%v", body)
	require.EqualValues(t, 4, body["program"].(map[string]any)["version"])
	require.EqualValues(t, 1, body["program"].(map[string]any)["rollbackOf"])
	st, body = call(t, http.MethodPost, base+"/v1/programs/mine/rollback", "admin-token", map[string]int{"version": 2})
	require.Equal(t, http.StatusOK, st, "%v", body)
	st, body = call(t, http.MethodPost, base+"/v1/programs/none/rollback", "admin-token", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, string(pigeon.CodeProgramNotFound), errCode(body))

	for range programs.DefaultKeepVersions {
		deploy("admin-token", "mine", progAcc, modOK)
	}
	st, body = call(t, http.MethodPost, base+"/v1/programs/mine/rollback", "admin-token", map[string]int{"version": 1})
	require.Equal(t, http.StatusGone, st, "%v", body)
	require.Equal(t, string(pigeon.CodeProgramVersionPruned), errCode(body))
}

// A program's history is bounded: every earlier version keeps its
// manifest (up to 64 KiB) in the record rewritten at each deploy and read
// by every GET, so redeploying again and again would grow it without end.
// It lists the last MaxHistory earlier versions; an older one is refused
// as pruned.
func TestProgramHistoryIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	const n = programs.MaxHistory + 3
	var in programs.Info
	var err error
	for range n {
		in, err = f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
		require.NoError(t, err)
	}
	require.Equal(t, n, in.Version)
	require.Len(t, in.History, programs.MaxHistory)
	require.Equal(t, n-programs.MaxHistory, in.History[0].Version, "the oldest are dropped")
	require.Equal(t, n-1, in.History[len(in.History)-1].Version)
	_, err = f.mg.Rollback(ctx, admin, "p", 1)
	require.Equal(t, pigeon.CodeProgramVersionPruned, pigeon.ErrorCode(err), "a dropped version is pruned")
	_, err = f.mg.Rollback(ctx, admin, "p", n+1)
	require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err))
	in, err = f.mg.Rollback(ctx, admin, "p", n-1)
	require.NoError(t, err, "a kept version rolls back")
	require.Len(t, in.History, programs.MaxHistory)
}
