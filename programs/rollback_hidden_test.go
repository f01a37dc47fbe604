package programs_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A principal without RoleAdmin is not shown the versions of its program
// that ran as another account (an admin moved the program to it), and
// a version it names that was never deployed is 404 PROGRAM_NOT_FOUND.
// A rollback to one of those hidden versions answered 403 FORBIDDEN: a
// probe that told it which version ran as another account. It is now
// answered as a version none holds (404 PROGRAM_NOT_FOUND), and the
// refusal is still audited as what it is.
func TestRollbackToAHiddenVersionIsAnUnknownVersion(t *testing.T) {
	f := newFixture(t, nil)
	base := f.serve(t)
	deploy := func(account string) {
		st, body := call(t, http.MethodPut, base+"/v1/programs/moved", "admin-token",
			map[string]any{"manifest": map[string]any{"route": map[string]any{"subject": "orders.in", "group": "moved"}, "account": account}, "module": modOK})
		require.Less(t, st, 300, "%v", body)
	}
	deploy(other)   // version 1, another account's: hidden from progAcc
	deploy(progAcc) // version 2, progAcc's own
	for _, tc := range []struct {
		name string
		body any
	}{
		{"hidden", map[string]int{"version": 1}},
		{"hidden, as the one before", nil},
		{"never deployed", map[string]int{"version": 9}},
	} {
		st, body := call(t, http.MethodPost, base+"/v1/programs/moved/rollback", "deployer-token", tc.body)
		require.Equal(t, http.StatusNotFound, st, "%s: %v", tc.name, body)
		require.Equal(t, string(pigeon.CodeProgramNotFound), errCode(body), tc.name)
	}
	var denied int
	for _, r := range f.audited(t, pigeon.EventAccessDenied) {
		if r.Principal == progAcc && r.Code == string(pigeon.CodeForbidden) {
			denied++
		}
	}
	require.NotZero(t, denied, "the refusals are audited as what they are")
	in, err := f.mg.Get(context.Background(), "moved")
	require.NoError(t, err)
	require.Equal(t, 2, in.Version, "nothing was rolled back")
}
