package programs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A principal with the role programs, shown another account's program as
// a name none holds (PROGRAM_NOT_FOUND on GET), learnt its versions by
// rolling it back: the version it named was checked before whose program
// it was, so "the one running" (400), "no version N" (404), "pruned"
// (410) and "no earlier version" (400) told it the current version and
// which earlier ones exist, unaudited, before any 403. Every rollback of
// another account's program is now 403 FORBIDDEN, audited, whatever
// version it names.
func TestRollbackDoesNotProbeAnotherAccountsVersions(t *testing.T) {
	f := newFixture(t, nil)
	base := f.serve(t)
	deploy := func(name string) {
		st, body := call(t, http.MethodPut, base+"/v1/programs/"+name, "admin-token",
			map[string]any{"manifest": map[string]any{"route": map[string]any{"subject": "orders.in", "group": name}, "account": other}, "module": modOK})
		require.Less(t, st, 300, "%v", body)
	}
	for range 3 {
		deploy("theirs")
	}
	deploy("single")
	for _, tc := range []struct {
		name string
		body any
	}{
		{"theirs", nil},
		{"theirs", map[string]int{"version": 1}},
		{"theirs", map[string]int{"version": 3}},  // the one running
		{"theirs", map[string]int{"version": 9}},  // none
		{"theirs", map[string]int{"version": -1}}, // malformed
		{"single", nil},                           // no earlier version
	} {
		st, body := call(t, http.MethodPost, base+"/v1/programs/"+tc.name+"/rollback", "deployer-token", tc.body)
		require.Equal(t, http.StatusForbidden, st, "%s %v: %v", tc.name, tc.body, body)
		require.Equal(t, string(pigeon.CodeForbidden), errCode(body))
	}
	var denied int
	for _, r := range f.audited(t, pigeon.EventAccessDenied) {
		if r.Principal == progAcc {
			denied++
		}
	}
	require.NotZero(t, denied, "the probes are audited (coalesced per principal)")
	in, err := f.mg.Get(context.Background(), "theirs")
	require.NoError(t, err)
	require.Equal(t, 3, in.Version, "nothing was rolled back")
}
