package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/server"
)

// modNoop is the smallest module of the programs ABI: pigeon_alloc
// returns a fixed buffer, pigeon_handle acknowledges every message, and
// it exports its memory (programs' abiModule(handleOK, 1)).
var modNoop = []byte("\x00asm\x01\x00\x00\x00\x01\f\x02`\x01\x7f\x01\x7f`\x02\x7f\x7f\x01\x7f\x02\x01\x00\x03\x03\x02\x00\x01" +
	"\x05\x03\x01\x00\x01\a)\x03\fpigeon_alloc\x00\x00\rpigeon_handle\x00\x01\x06memory\x02\x00\n\f\x02\x05\x00A\x80\b\v\x04\x00A\x00\v")

// Accounts of the programs tests: each may run programs on jobs.in;
// deployer-a holds the role programs for svc-a, deployer-b for svc-b.
const (
	progA = "svc-a"
	progB = "svc-b"
)

// programsServer serves an engine with a programs Manager: admin-token
// (admin), a-token (svc-a, programs), b-token (svc-b, programs) and
// g-token (svc-g, an account a test creates), on
// jobs.in (svc-a and svc-b receive it) and jobs.secret (for the role
// reader).
func programsServer(t *testing.T) (*pigeon.Engine, *programs.Manager, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	allow := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{progA, progB}}}
	readers := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Roles: []string{"reader"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "admin-token", Principal: "admin", Roles: []string{pigeon.RoleAdmin}},
			pigeon.StaticToken{Token: "a-token", Principal: progA, Roles: []string{server.RolePrograms}},
			pigeon.StaticToken{Token: "b-token", Principal: progB, Roles: []string{server.RolePrograms}},
			pigeon.StaticToken{Token: "g-token", Principal: "svc-g"}, // its roles are its account's
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{Name: "jobs.in", Version: "v1", Mode: pigeon.ModeWorkQueue,
			Intents: []string{"record"}, Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: allow, pigeon.OpReceive: allow, pigeon.OpAck: allow}},
			{Name: "jobs.secret", Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"record"},
				Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: readers, pigeon.OpReceive: readers, pigeon.OpAck: readers}}}},
	})
	require.NoError(t, err)
	for _, id := range []string{progA, progB} {
		_, err := e.CreateAccount(ctx, pigeon.Account{ID: id})
		require.NoError(t, err)
	}
	mg, err := programs.New(ctx, e, nil)
	require.NoError(t, err)
	s := server.New(e, &server.Options{Programs: mg})
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		hs.Close()
		require.NoError(t, mg.Close(ctx))
		require.NoError(t, e.Shutdown(ctx))
	})
	return e, mg, hs
}

// deployBody is a PUT /v1/programs/{name} body running as account on
// jobs.in, or on the subject given.
func deployBody(t *testing.T, account string, subject ...string) string {
	t.Helper()
	on := "jobs.in"
	if len(subject) > 0 {
		on = subject[0]
	}
	b, err := json.Marshal(map[string]any{
		"manifest": map[string]any{"route": map[string]any{"subject": on}, "account": account},
		"module":   modNoop,
	})
	require.NoError(t, err)
	return string(b)
}

// TestDeployCannotTakeOverAnotherAccountsProgram: a principal with the
// role programs but not admin deploys only programs that run as its own
// account, and a deploy under a name another account's program holds
// would replace that program (stop it, take its name and its history),
// which is a removal it may not make. It is refused 403 FORBIDDEN,
// audited as access.denied, and the other program runs on untouched;
// new versions of one's own programs and new names still deploy.
func TestDeployCannotTakeOverAnotherAccountsProgram(t *testing.T) {
	e, _, hs := programsServer(t)
	put := func(token, name, account string) response {
		return doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+name, token, deployBody(t, account))
	}
	program := func(name string) map[string]any {
		r := doRequest(t, http.MethodGet, hs.URL+"/v1/programs/"+name, "admin-token", "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		return r.json(t)["program"].(map[string]any)
	}

	r := put("b-token", "billing", progB)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = put("admin-token", "shared", progB)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

	for _, c := range []struct{ token, name, account, why string }{
		{"a-token", "billing", progA, "svc-a would replace svc-b's program with one of its own"},
		{"a-token", "shared", progA, "an admin deployed it, as svc-b"},
		{"a-token", "billing", progB, "and never as another account"},
	} {
		r := put(c.token, c.name, c.account)
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", c.why, r.body)
		require.Equal(t, pigeon.CodeForbidden, r.code(t))
	}
	for _, name := range []string{"billing", "shared"} {
		p := program(name)
		require.EqualValues(t, 1, p["version"], "%s is not replaced", name)
		require.Equal(t, progB, p["manifest"].(map[string]any)["account"])
		require.NotEqual(t, progA, p["deployedBy"], "%s", name)
		require.Equal(t, true, p["bound"])
	}

	requireDeploysDenied(t, e, progA)

	// One's own programs: a new name, then a new version of it.
	r = put("a-token", "mine", progA)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = put("a-token", "mine", progA)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	// An admin may move a program to another account.
	r = put("admin-token", "billing", progA)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, progA, program("billing")["manifest"].(map[string]any)["account"])
}

// TestChangesCannotSlipPastTheOwnerCheck: a principal without the admin
// role may deploy, roll back or remove only a program that runs as its
// own account (or, for a deploy, none). Another account's deploy under the
// same name that comes between the request's check and its change must
// not be replaced, rolled back or removed: the check and the change are
// one step, under the program's lock. Before, svc-b's program deployed
// there was replaced by svc-a's (its name and history taken), rolled back
// or removed.
func TestChangesCannotSlipPastTheOwnerCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// mine is whether svc-a's program runs under the name first;
		// change is svc-a's request.
		mine   bool
		change func(hs *httptest.Server, name string) response
	}{
		{"deploy", false, func(hs *httptest.Server, name string) response {
			return doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+name, "a-token", deployBody(t, progA))
		}},
		{"rollback", true, func(hs *httptest.Server, name string) response {
			return doRequest(t, http.MethodPost, hs.URL+"/v1/programs/"+name+"/rollback", "a-token", `{}`)
		}},
		{"remove", true, func(hs *httptest.Server, name string) response {
			return doRequest(t, http.MethodDelete, hs.URL+"/v1/programs/"+name, "a-token", "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, hs := programsServer(t)
			const name = "contested"
			if tc.mine {
				for range 2 { // two versions: a rollback has one to go back to
					r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+name, "a-token", deployBody(t, progA))
					require.Less(t, r.status, 300, "%s", r.body)
				}
			}
			var moved atomic.Bool
			restore := server.SetProgramChangeHook(func(string) {
				if moved.Swap(true) {
					return // the admin's own deploy below
				}
				// An admin moves the name to svc-b between svc-a's check
				// and its change.
				r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+name, "admin-token", deployBody(t, progB))
				require.Less(t, r.status, 300, "%s", r.body)
			})
			defer restore()

			r := tc.change(hs, name)
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeForbidden, r.code(t))
			r = doRequest(t, http.MethodGet, hs.URL+"/v1/programs/"+name, "admin-token", "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			p := r.json(t)["program"].(map[string]any)
			require.Equal(t, progB, p["manifest"].(map[string]any)["account"], "svc-b's program still runs")
			require.Equal(t, "admin", p["deployedBy"])
		})
	}
}

// TestGrantTokenCannotDeployAsItsAccount: a program runs as its
// manifest's account, under a contract negotiated with every role the
// account holds. A grant token hands a program some roles of an account,
// not the account: one carrying the role programs (and not admin) that
// deployed a program as its account would run code of its choosing with
// the roles the grant left out, on subjects it may not negotiate itself.
// It is refused 403 FORBIDDEN, audited, as publishing the account's keys
// is; the account's own credential still deploys.
func TestGrantTokenCannotDeployAsItsAccount(t *testing.T) {
	e, mg, hs := programsServer(t)
	const acct = "svc-g"
	do := func(method, path, token, body string) response {
		return doRequest(t, method, hs.URL+path, token, body)
	}
	r := do(http.MethodPost, "/v1/accounts", "admin-token", `{"id":"`+acct+`","roles":["`+server.RolePrograms+`","reader"]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = do(http.MethodPost, "/v1/grants", "admin-token", `{"account":"`+acct+`","roles":["`+server.RolePrograms+`"],"ttlMs":600000}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	grant := r.json(t)["token"].(string)

	r = do(http.MethodPost, "/v1/contracts", grant, `{"subjects":["jobs.secret"]}`)
	require.Equal(t, http.StatusForbidden, r.status, "the grant itself may not receive jobs.secret: %s", r.body)

	for _, subject := range []string{"jobs.secret", "jobs.in"} {
		r = do(http.MethodPut, "/v1/programs/exfil", grant, deployBody(t, acct, subject))
		require.Equal(t, http.StatusForbidden, r.status, "%s: %s", subject, r.body)
		require.Equal(t, pigeon.CodeForbidden, r.code(t))
	}
	_, err := mg.Get(context.Background(), "exfil")
	require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "nothing was deployed")

	requireDeploysDenied(t, e, acct)

	// The account's own credential, and an admin, still deploy as the
	// account; a grant still may not roll back to what they deployed.
	r = do(http.MethodPut, "/v1/programs/reader", "g-token", deployBody(t, acct, "jobs.secret"))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = do(http.MethodPut, "/v1/programs/reader", "admin-token", deployBody(t, acct, "jobs.secret"))
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = do(http.MethodPost, "/v1/programs/reader/rollback", grant, "")
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	r = do(http.MethodPost, "/v1/programs/reader/rollback", "g-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}

// requireDeploysDenied asserts that e's audit log holds access.denied
// records of refused deploys (PUT /v1/programs/{name}), all of principal.
func requireDeploysDenied(t *testing.T, e *pigeon.Engine, principal string) {
	t.Helper()
	recs, err := e.Audit(context.Background(), 0, 0)
	require.NoError(t, err)
	var denied []string
	for _, rec := range recs {
		if rec.Type == string(pigeon.EventAccessDenied) {
			require.Equal(t, principal, rec.Principal)
			require.Contains(t, rec.Ref, "PUT /v1/programs/{name}") // the first in full, then coalesced:N …
			denied = append(denied, rec.Ref)
		}
	}
	require.Contains(t, denied, "PUT /v1/programs/{name}", "the refusals are audited")
}

// TestProgramsAreShownOnlyToTheirAccount: a principal with the role
// programs but not admin sees only the programs that run as its own
// account, as it may change only those: another account's manifest (its
// env), contract and history are not listed, and showing it by name is
// PROGRAM_NOT_FOUND, as for a name none holds. An admin sees every one.
func TestProgramsAreShownOnlyToTheirAccount(t *testing.T) {
	_, _, hs := programsServer(t)
	for _, p := range []struct{ token, name, account string }{{"a-token", "mine", progA}, {"b-token", "theirs", progB}} {
		r := doRequest(t, http.MethodPut, hs.URL+"/v1/programs/"+p.name, p.token, deployBody(t, p.account))
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	}
	names := func(token string) []string {
		r := doRequest(t, http.MethodGet, hs.URL+"/v1/programs", token, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		out := []string{}
		for _, p := range r.json(t)["programs"].([]any) {
			out = append(out, p.(map[string]any)["name"].(string))
		}
		slices.Sort(out)
		return out
	}
	require.Equal(t, []string{"mine"}, names("a-token"))
	require.Equal(t, []string{"theirs"}, names("b-token"))
	require.Equal(t, []string{"mine", "theirs"}, names("admin-token"))

	r := doRequest(t, http.MethodGet, hs.URL+"/v1/programs/theirs", "a-token", "")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	require.Equal(t, pigeon.CodeProgramNotFound, r.code(t))
	require.NotContains(t, r.body, progB)
	r = doRequest(t, http.MethodGet, hs.URL+"/v1/programs/mine", "a-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = doRequest(t, http.MethodGet, hs.URL+"/v1/programs/theirs", "admin-token", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}
