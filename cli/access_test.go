package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// notifyRole is the body of a role that may publish notifications.
const notifyRole = `{"permissions":[{"subject":"notifications.send","operations":["publish"]}]}`

// requireRefused checks that a command exited 1 with code: the line
// "pigeon CMD: CODE", then the server's JSON error body, on stderr. It
// returns the error's message.
func requireRefused(t *testing.T, cmd string, code pigeon.Code, exit int, stderr string) string {
	t.Helper()
	require.Equal(t, 1, exit, stderr)
	lines := strings.SplitN(stderr, "\n", 2)
	require.Equal(t, "pigeon "+cmd+": "+string(code), lines[0])
	require.Len(t, lines, 2, stderr)
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &body), stderr)
	require.Equal(t, string(code), body.Error.Code)
	require.NotEmpty(t, body.Error.Message)
	return body.Error.Message
}

// cmdName is the command of a command line: "account role add" of
// account role add ID ROLE, "grant issue" of grant issue --account ID.
func cmdName(args []string) string {
	if args[0] == "account" && args[1] == "role" {
		return strings.Join(args[:3], " ")
	}
	return strings.Join(args[:2], " ")
}

// negotiateHTTP asks url for a contract on subject with token, as a
// program holding a grant token would, and returns the status and body.
func negotiateHTTP(t *testing.T, url, token, subject string) (int, []byte) {
	t.Helper()
	return send(t, http.MethodPost, url+"/v1/contracts", token, `{"subjects":["`+subject+`"]}`)
}

// The access commands end to end against a running serve, as an operator
// hands a program a grant and takes it back: role put (from a file and
// from standard input), list and show; account create, list and show; a
// grant issued for the account's role whose token negotiates a contract
// and publishes under it; account role remove, after which the contract's
// next publish is refused with GRANT_REVOKED; grant revoke, after which
// the token itself is refused (401); then account role add, account
// delete and role delete. Each answer is one JSON document on stdout; a
// listing prints one an entry.
func TestAccessCommands(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "admin-token") // the environment's token, as an operator's shell has it
	ctx := context.Background()
	r := startServe(t, serveConfig{})
	const id = "spiffe://merchant-prod/ns/shop:eu/sa/notify-api" // not in the catalog: only the role lets it publish
	dir := t.TempDir()
	roleFile := filepath.Join(dir, "notify.json")
	require.NoError(t, os.WriteFile(roleFile, []byte(notifyRole), 0o600))

	// run runs a command that must succeed and decodes its one document.
	run := func(t *testing.T, args ...string) map[string]any {
		t.Helper()
		exit, stdout, stderr := r.pigeon(t, ctx, args...)
		require.Equal(t, 0, exit, stderr)
		require.Empty(t, stderr)
		var out map[string]any
		dec := json.NewDecoder(strings.NewReader(stdout))
		require.NoError(t, dec.Decode(&out), stdout)
		require.False(t, dec.More(), "one document: %s", stdout)
		return out
	}
	// listed runs a listing that must succeed and returns the member key
	// of each entry, one JSON document a line.
	listed := func(t *testing.T, key string, args ...string) []string {
		t.Helper()
		exit, stdout, stderr := r.pigeon(t, ctx, args...)
		require.Equal(t, 0, exit, stderr)
		require.Empty(t, stderr)
		var names []string
		for l := range strings.Lines(stdout) {
			var entry map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &entry), "one document a line: %s", stdout)
			names = append(names, entry[key].(string))
		}
		return names
	}
	role := func(out map[string]any) map[string]any { return out["role"].(map[string]any) }
	account := func(out map[string]any) map[string]any { return out["account"].(map[string]any) }

	out := run(t, "role", "put", "notify", "--file", roleFile)
	require.Equal(t, "notify", role(out)["name"])
	require.Len(t, role(out)["permissions"], 1)
	// The same body from standard input.
	stdin := os.Stdin
	t.Cleanup(func() { os.Stdin = stdin })
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	os.Stdin = pr
	_, err = pw.WriteString(strings.Replace(notifyRole, `"publish"`, `"receive"`, 1))
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	out = run(t, "role", "put", "reader", "--file", "-")
	os.Stdin = stdin
	require.NoError(t, pr.Close())
	require.Len(t, role(out)["permissions"], 1, "the body of standard input")
	require.Equal(t, []any{"receive"}, role(out)["permissions"].([]any)[0].(map[string]any)["operations"])
	require.Equal(t, []string{"notify", "reader"}, listed(t, "name", "role", "list"))
	out = run(t, "role", "show", "notify")
	require.Equal(t, "notifications.send", role(out)["permissions"].([]any)[0].(map[string]any)["subject"])

	out = run(t, "account", "create", id, "--role", "notify")
	require.Equal(t, id, account(out)["id"])
	require.Equal(t, []any{"notify"}, account(out)["roles"])
	require.Equal(t, []string{id}, listed(t, "id", "account", "list"))
	out = run(t, "account", "show", id)
	require.Equal(t, []any{"notify"}, account(out)["roles"])

	// The grant's token negotiates a contract for the subject its role
	// grants, and publishes under it.
	out = run(t, "grant", "issue", "--account", id, "--role", "notify", "--ttl", "2h")
	token, jti := out["token"].(string), out["jti"].(string)
	require.NotEmpty(t, token)
	require.True(t, strings.HasPrefix(jti, "gr_"), jti)
	expires, err := time.Parse(time.RFC3339, out["expiresAt"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), expires, time.Minute, "--ttl reached the server")
	status, body := negotiateHTTP(t, r.url, token, "notifications.send")
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var neg struct{ Contract pigeon.ContractInfo }
	require.NoError(t, json.Unmarshal(body, &neg))
	publish := func(key string) (int, string, string) {
		return r.pigeon(t, ctx, "publish", "--token", token, "--contract", neg.Contract.ID, "--subject", "notifications.send",
			"--intent", "send_notification", "--key", key, "--classification", "pii",
			"--data", `{"recipientId":"cust-42","channel":"email","templateId":"order-shipped"}`)
	}
	exit, stdout, stderr := publish("k-1")
	require.Equal(t, 0, exit, stderr)
	require.Contains(t, stdout, `"status": "accepted"`)

	// Taking the role away refuses the contract's next publish.
	out = run(t, "account", "role", "remove", id, "notify")
	require.Equal(t, []any{}, account(out)["roles"])
	exit, _, stderr = publish("k-2")
	requireRefused(t, "publish", pigeon.CodeGrantRevoked, exit, stderr)

	// A revoked grant's token is refused at authentication.
	out = run(t, "grant", "revoke", jti)
	require.Equal(t, true, out["ok"])
	status, body = negotiateHTTP(t, r.url, token, "notifications.send")
	require.Equal(t, http.StatusUnauthorized, status, "%s", body)

	out = run(t, "account", "role", "add", id, "reader")
	require.Equal(t, []any{"reader"}, account(out)["roles"])
	require.Equal(t, true, run(t, "account", "delete", id)["ok"])
	exit, _, stderr = r.pigeon(t, ctx, "account", "show", id)
	requireRefused(t, "account show", pigeon.CodeNotFound, exit, stderr)
	require.Equal(t, true, run(t, "role", "delete", "notify")["ok"])
	exit, _, stderr = r.pigeon(t, ctx, "role", "show", "notify")
	requireRefused(t, "role show", pigeon.CodeNotFound, exit, stderr)
}

// The access commands' refusals: a caller without the role admin is
// refused by the server (exit 1, FORBIDDEN) on every command, an unknown
// account or a body the server judges wrong with the server's code (exit
// 1), and a wrong command line — a --ttl that is not a positive Go
// duration, a missing or extra argument, a missing flag, a file that is
// not JSON — before any request (exit 2).
func TestAccessCommandsRefused(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "")
	ctx := context.Background()
	r := startServe(t, serveConfig{})
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	roleFile, notJSON := file("role.json", notifyRole), file("bad.json", `{"permissions":[`)
	badOp := file("badop.json", `{"permissions":[{"subject":"notifications.send","operations":["steal"]}]}`)
	const known = "spiffe://merchant-prod/ns/shop/sa/api"
	createAccount(t, r.url, known)

	for _, tc := range []struct {
		name string
		args []string // the token is the last two
		exit int
		code pigeon.Code // of a refusal
	}{
		// Not an admin: the server refuses every command.
		{"grant issue: no role admin", []string{"grant", "issue", "--account", known, "--role", "notify", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"grant revoke: no role admin", []string{"grant", "revoke", "gr_x", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account list: no role admin", []string{"account", "list", "--token", "auditor-token"}, 1, pigeon.CodeForbidden},
		{"account show: no role admin", []string{"account", "show", known, "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account create: no role admin", []string{"account", "create", "x", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account delete: no role admin", []string{"account", "delete", known, "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account role add: no role admin", []string{"account", "role", "add", known, "admin", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account role remove: no role admin", []string{"account", "role", "remove", known, "admin", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"role list: no role admin", []string{"role", "list", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"role show: no role admin", []string{"role", "show", "notify", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"role put: no role admin", []string{"role", "put", "notify", "--file", roleFile, "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"role delete: no role admin", []string{"role", "delete", "notify", "--token", "orders-token"}, 1, pigeon.CodeForbidden},
		{"account list: no credential", []string{"account", "list"}, 1, pigeon.CodeUnauthenticated},

		// The server judges what the command line cannot.
		{"grant issue: unknown account", []string{"grant", "issue", "--account", "spiffe://merchant-prod/ns/x/sa/nobody", "--role", "notify", "--token", "admin-token"}, 1, pigeon.CodeNotFound},
		{"account show: unknown account", []string{"account", "show", "spiffe://merchant-prod/ns/x/sa/nobody", "--token", "admin-token"}, 1, pigeon.CodeNotFound},
		{"account delete: unknown account", []string{"account", "delete", "nobody", "--token", "admin-token"}, 1, pigeon.CodeNotFound},
		{"account role add: unknown account", []string{"account", "role", "add", "nobody", "notify", "--token", "admin-token"}, 1, pigeon.CodeNotFound},
		{"account create: exists", []string{"account", "create", known, "--token", "admin-token"}, 1, pigeon.CodeConflict},
		{"grant revoke: unknown grant", []string{"grant", "revoke", "gr_nope", "--token", "admin-token"}, 1, pigeon.CodeNotFound},
		{"grant issue: --ttl beyond 30 days", []string{"grant", "issue", "--account", known, "--role", "notify", "--ttl", "721h", "--token", "admin-token"}, 1, pigeon.CodeInvalidArgument},
		{"role put: unknown operation", []string{"role", "put", "notify", "--file", badOp, "--token", "admin-token"}, 1, pigeon.CodeBadRequest},

		// A wrong command line.
		{"grant issue: --ttl 0", []string{"grant", "issue", "--account", known, "--role", "notify", "--ttl", "0", "--token", "admin-token"}, 2, ""},
		{"grant issue: negative --ttl", []string{"grant", "issue", "--account", known, "--role", "notify", "--ttl", "-1h", "--token", "admin-token"}, 2, ""},
		{"grant issue: --ttl below 1ms", []string{"grant", "issue", "--account", known, "--role", "notify", "--ttl", "500us", "--token", "admin-token"}, 2, ""},
		{"grant issue: --ttl not a duration", []string{"grant", "issue", "--account", known, "--role", "notify", "--ttl", "1d", "--token", "admin-token"}, 2, ""},
		{"grant issue: no --account", []string{"grant", "issue", "--role", "notify", "--token", "admin-token"}, 2, ""},
		{"grant issue: no --role", []string{"grant", "issue", "--account", known, "--token", "admin-token"}, 2, ""},
		{"grant issue: an argument", []string{"grant", "issue", known, "--role", "notify", "--token", "admin-token"}, 2, ""},
		{"grant revoke: no jti", []string{"grant", "revoke", "--token", "admin-token"}, 2, ""},
		{"grant revoke: two", []string{"grant", "revoke", "gr_a", "gr_b", "--token", "admin-token"}, 2, ""},
		{"account list: an argument", []string{"account", "list", known, "--token", "admin-token"}, 2, ""},
		{"account show: no id", []string{"account", "show", "--token", "admin-token"}, 2, ""},
		{"account show: empty id", []string{"account", "show", "", "--token", "admin-token"}, 2, ""},
		{"account create: no id", []string{"account", "create", "--role", "notify", "--token", "admin-token"}, 2, ""},
		{"account delete: no id", []string{"account", "delete", "--token", "admin-token"}, 2, ""},
		{"account role add: no role", []string{"account", "role", "add", known, "--token", "admin-token"}, 2, ""},
		{"account role remove: no id", []string{"account", "role", "remove", "--token", "admin-token"}, 2, ""},
		{"account role: no verb", []string{"account", "role", "--token", "admin-token"}, 2, ""},
		{"account role: unknown verb", []string{"account", "role", "grant", known, "admin", "--token", "admin-token"}, 2, ""},
		{"role show: no name", []string{"role", "show", "--token", "admin-token"}, 2, ""},
		{"role put: no --file", []string{"role", "put", "notify", "--token", "admin-token"}, 2, ""},
		{"role put: no name", []string{"role", "put", "--file", roleFile, "--token", "admin-token"}, 2, ""},
		{"role put: not JSON", []string{"role", "put", "notify", "--file", notJSON, "--token", "admin-token"}, 2, ""},
		{"role delete: --file", []string{"role", "delete", "notify", "--file", roleFile, "--token", "admin-token"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exit, stdout, stderr := r.pigeon(t, ctx, tc.args...)
			require.Empty(t, stdout)
			if tc.code != "" {
				requireRefused(t, cmdName(tc.args), tc.code, exit, stderr)
				return
			}
			require.Equal(t, tc.exit, exit, stderr)
			require.NotEmpty(t, stderr, "a usage error says what is wrong")
		})
	}
	// Nothing the refusals named was changed.
	exit, stdout, stderr := r.pigeon(t, ctx, "account", "list", "--token", "admin-token")
	require.Equal(t, 0, exit, stderr)
	require.Equal(t, 1, strings.Count(stdout, `"id"`), stdout)
	exit, stdout, stderr = r.pigeon(t, ctx, "role", "list", "--token", "admin-token")
	require.Equal(t, 0, exit, stderr)
	require.NotContains(t, stdout, "notify")
}

// Every id in a path is escaped as one segment, so it reaches the server
// whole: an account id with '/' and ':' (a SPIFFE id) and a role name
// with them round-trip through every command that names them in a path;
// and one with '?' is the server's to judge — not found, or refused as
// a character ids may not hold — never read as the id before the '?'
// followed by a query (which would show or delete that account, or give
// it the role admin).
func TestAccessCommandsEscapeIDs(t *testing.T) {
	t.Setenv("PIGEON_TOKEN", "admin-token")
	ctx := context.Background()
	r := startServe(t, serveConfig{})
	const id, role = "spiffe://merchant-prod/ns/shop:eu/sa/api", "ops:eu/reader"
	roleFile := filepath.Join(t.TempDir(), "role.json")
	require.NoError(t, os.WriteFile(roleFile, []byte(notifyRole), 0o600))

	for _, tc := range []struct {
		name string
		args []string
		code pigeon.Code // of a refusal
		want string      // in the answer, or the refusal's message
	}{
		{"account create", []string{"account", "create", id}, "", `"id": "` + id + `"`},
		{"account show", []string{"account", "show", id}, "", `"id": "` + id + `"`},
		{"role put", []string{"role", "put", role, "--file", roleFile}, "", `"name": "` + role + `"`},
		{"role show", []string{"role", "show", role}, "", `"name": "` + role + `"`},
		{"account role add", []string{"account", "role", "add", id, role}, "", `"roles": [` + "\n      \"" + role + `"`},
		{"account role remove", []string{"account", "role", "remove", id, role}, "", `"roles": []`},
		{"account show ?", []string{"account", "show", id + "?v=2"}, pigeon.CodeNotFound, "no account " + id + "?v=2"},
		{"account delete ?", []string{"account", "delete", id + "?v=2"}, pigeon.CodeNotFound, "no account " + id + "?v=2"},
		{"account role add ?", []string{"account", "role", "add", id, "admin?x"}, pigeon.CodeInvalidArgument, "a role name"},
		{"account role remove ?", []string{"account", "role", "remove", id + "?v=2", role}, pigeon.CodeNotFound, "no account " + id + "?v=2"},
		{"role show ?", []string{"role", "show", role + "?v=2"}, pigeon.CodeNotFound, role + "?v=2"},
		{"role delete ?", []string{"role", "delete", role + "?v=2"}, pigeon.CodeNotFound, role + "?v=2"},
		{"account show, after", []string{"account", "show", id}, "", `"roles": []`},
		{"role delete", []string{"role", "delete", role}, "", `"ok": true`},
		{"account delete", []string{"account", "delete", id}, "", `"ok": true`},
		{"account show, deleted", []string{"account", "show", id}, pigeon.CodeNotFound, "no account " + id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exit, stdout, stderr := r.pigeon(t, ctx, tc.args...)
			if tc.code != "" {
				require.Empty(t, stdout)
				require.Contains(t, requireRefused(t, cmdName(tc.args), tc.code, exit, stderr), tc.want)
				return
			}
			require.Equal(t, 0, exit, stderr)
			require.Contains(t, stdout, tc.want)
		})
	}
}
