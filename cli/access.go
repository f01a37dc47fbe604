package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The access commands are the command line of the admin API's accounts,
// roles and grants (docs/http.md, role admin): each call is one request
// whose answer is printed as one JSON document on stdout (account list and
// role list read page after page and print one document an entry:
// nameListing); a refusal is the typed error (code, then the JSON error
// body) on stderr and exit 1; a wrong command line exits 2. Every id in a
// path — an account id is a principal id such as spiffe://org/ns/x/sa/y, a
// role name, a grant's jti — is path-escaped as one segment.

// accessCmd is one access command: its flags (the client flags and its
// own) and its positional arguments.
type accessCmd struct {
	name   string   // "account role add"
	args   []string // the names of its positional arguments: "ID", "ROLE"
	fs     *flag.FlagSet
	a      *api
	stderr io.Writer
}

// newAccessCmd returns the command name taking the positional arguments
// args; about is its help.
func newAccessCmd(name, about string, stderr io.Writer, args ...string) *accessCmd {
	c := &accessCmd{name: name, args: args, fs: flag.NewFlagSet(name, flag.ContinueOnError), stderr: stderr}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: pigeon %s [flags]\n\n%s\n\nflags:\n", c.synopsis(), about)
		c.fs.PrintDefaults()
	}
	c.a = clientFlags(c.fs)
	return c
}

func (c *accessCmd) synopsis() string { return strings.Join(append([]string{c.name}, c.args...), " ") }

// parse parses args, flags before or after the positional arguments, and
// returns the positional ones; exit is -1 when they are what the command
// takes, else the exit code (0 for -h, 2 for a wrong command line).
func (c *accessCmd) parse(args []string) (pos []string, exit int) {
	pos, err := parseInterspersed(c.fs, args)
	if err != nil {
		return nil, parseExit(err)
	}
	ok := len(pos) == len(c.args)
	for i := 0; ok && i < len(pos); i++ {
		ok = pos[i] != ""
	}
	if !ok {
		fmt.Fprintf(c.stderr, "pigeon %s: usage: pigeon %s [flags]\n", c.name, c.synopsis())
		return nil, 2
	}
	return pos, -1
}

// usageError prints msg and returns exit code 2.
func (c *accessCmd) usageError(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "pigeon %s: %s\n", c.name, fmt.Sprintf(format, a...))
	return 2
}

// call sends one request and prints its answer; a refusal is exit 1.
func (c *accessCmd) call(ctx context.Context, method, path string, body any, stdout io.Writer) int {
	b, err := c.a.do(ctx, method, path, body)
	if err != nil {
		return fail(c.stderr, c.name, err)
	}
	printJSON(stdout, b)
	return 0
}

// request runs name, an access command with no flags of its own beyond
// the client's: one request, method on the path that path builds from its
// positional arguments, named argNames.
func request(ctx context.Context, name, about, method string, path func(pos []string) string, args []string, stdout, stderr io.Writer, argNames ...string) int {
	c := newAccessCmd(name, about, stderr, argNames...)
	pos, exit := c.parse(args)
	if exit >= 0 {
		return exit
	}
	return c.call(ctx, method, path(pos), nil, stdout)
}

// grantCmd runs pigeon grant issue|revoke: POST /v1/grants and DELETE
// /v1/grants/{jti}.
func grantCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	if sub == "revoke" {
		return request(ctx, "grant revoke", "Revoke a grant token: it is refused from then on, and every contract negotiated with it\nfails its next check (role admin).",
			http.MethodDelete, func(pos []string) string { return "/v1/grants/" + url.PathEscape(pos[0]) }, args, stdout, stderr, "JTI")
	}
	c := newAccessCmd("grant issue", "Issue a grant token that hands roles of an account to a program (role admin); it prints\n{token, jti, expiresAt}. Revoke it with pigeon grant revoke JTI.", stderr)
	account := c.fs.String("account", "", "the account the token acts as (required)")
	var roles []string
	c.fs.Var(&listFlag{v: &roles}, "role", "a role of the account the token carries (required; repeat it, or separate with commas)")
	ttl := c.fs.Duration("ttl", 0, "how long the token lives, a Go duration such as 15m or 24h (default: the server's, 1h; the server allows at most 30 days)")
	if _, exit := c.parse(args); exit >= 0 {
		return exit
	}
	if *account == "" || len(roles) == 0 {
		return c.usageError("--account and at least one --role are required")
	}
	body := map[string]any{"account": *account, "roles": roles}
	ttlSet := false
	c.fs.Visit(func(f *flag.Flag) { ttlSet = ttlSet || f.Name == "ttl" })
	if ttlSet {
		if *ttl < time.Millisecond { // the wire counts milliseconds, and 0 is the server's default
			return c.usageError("--ttl must be at least 1ms, not %s", *ttl)
		}
		body["ttlMs"] = ttl.Milliseconds()
	}
	return c.call(ctx, http.MethodPost, "/v1/grants", body, stdout)
}

// accountCmd runs pigeon account list|show|create|delete and account role
// add|remove: the /v1/accounts routes.
func accountCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	switch sub {
	case "list":
		c := newAccessCmd("account list", "List the accounts the broker keeps (role admin), by id, one JSON document a line,\npage after page.", stderr)
		limit, after := nameListingFlags(c.fs, "", "accounts", "account id")
		if _, exit := c.parse(args); exit >= 0 {
			return exit
		}
		return nameListing{cmd: c.name, noun: "accounts", path: "/v1/accounts", field: "accounts", key: "id", after: *after, max: limit()}.run(ctx, c.a, stdout, stderr)
	case "create":
		c := newAccessCmd("account create", "Create an account; ID is its principal id, e.g. spiffe://org/ns/x/sa/y (role admin).", stderr, "ID")
		var roles []string
		c.fs.Var(&listFlag{v: &roles}, "role", "a role of the account (repeat it, or separate with commas)")
		pos, exit := c.parse(args)
		if exit >= 0 {
			return exit
		}
		body := map[string]any{"id": pos[0]}
		if len(roles) > 0 {
			body["roles"] = roles
		}
		return c.call(ctx, http.MethodPost, "/v1/accounts", body, stdout)
	case "role":
		op := ""
		if len(args) > 0 {
			op, args = args[0], args[1:]
		}
		method, about := http.MethodPut, "Give the account the role (role admin)."
		switch op {
		case "add":
		case "remove":
			method, about = http.MethodDelete, "Take the role from the account: every contract that relied on it fails its next check\nwith GRANT_REVOKED (role admin)."
		default:
			fmt.Fprintf(stderr, "pigeon account role: add or remove, not %q\n", op)
			return 2
		}
		return request(ctx, "account role "+op, about, method, func(pos []string) string {
			return "/v1/accounts/" + url.PathEscape(pos[0]) + "/roles/" + url.PathEscape(pos[1])
		}, args, stdout, stderr, "ID", "ROLE")
	}
	method, about := http.MethodGet, "Show an account: its attributes, roles and keys (role admin)."
	if sub == "delete" {
		method, about = http.MethodDelete, "Delete an account, and the grants issued to it (role admin)."
	}
	return request(ctx, "account "+sub, about, method, func(pos []string) string { return "/v1/accounts/" + url.PathEscape(pos[0]) },
		args, stdout, stderr, "ID")
}

// roleCmd runs pigeon role list|show|put|delete: the /v1/roles routes.
func roleCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	if sub == "list" {
		c := newAccessCmd("role list", "List the roles the broker keeps, with their permissions (role admin), by name, one JSON\ndocument a line, page after page.", stderr)
		limit, after := nameListingFlags(c.fs, "", "roles", "role name")
		if _, exit := c.parse(args); exit >= 0 {
			return exit
		}
		return nameListing{cmd: c.name, noun: "roles", path: "/v1/roles", field: "roles", key: "name", after: *after, max: limit()}.run(ctx, c.a, stdout, stderr)
	}
	if sub != "put" {
		method, about := http.MethodGet, "Show a role and its permissions (role admin)."
		if sub == "delete" {
			method, about = http.MethodDelete, "Delete a role: every contract that relied on one of its permissions fails its next check\nwith GRANT_REVOKED (role admin)."
		}
		return request(ctx, "role "+sub, about, method, func(pos []string) string { return "/v1/roles/" + url.PathEscape(pos[0]) },
			args, stdout, stderr, "NAME")
	}
	c := newAccessCmd("role put", `Define or replace a role (role admin). The file is the request's body,
{"permissions":[{"subject":…,"operations":[…],"selector":…}]}, sent as it is: the server judges it.`, stderr, "NAME")
	file := c.fs.String("file", "", `the role's permissions, JSON {"permissions":[…]} ("-": standard input) (required)`)
	pos, exit := c.parse(args)
	if exit >= 0 {
		return exit
	}
	if *file == "" {
		return c.usageError("--file is required")
	}
	b, err := readFileArg(*file)
	if err != nil {
		return fail(stderr, c.name, err)
	}
	if !json.Valid(b) {
		return c.usageError("%s is not JSON", *file)
	}
	return c.call(ctx, http.MethodPut, "/v1/roles/"+url.PathEscape(pos[0]), json.RawMessage(b), stdout)
}
