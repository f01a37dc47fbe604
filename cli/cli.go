// Package cli is the pigeon command line: it runs a standalone Pigeon
// broker and talks to one. cmd/pigeon is Main with no options;
// store/jetstream's pigeon-cluster is Main with a Store for nats:// URLs
// (WithStore), so a cluster node serves with every flag of serve.
//
//	pigeon serve [--config pigeon.yaml] [--addr 127.0.0.1:8787] [--data ./pigeon-data] [--policies DIR] [--tokens FILE] [--region uk] [--sync batch|always|none] [--mesgd-subject S] [-v]
//	             [--log-format text|json] [--log-level debug|info|warn|error] [--metrics-addr ADDR]
//	             [--tls-cert FILE --tls-key FILE] [--client-ca FILE --trust-domain NAME [--mtls-mode required|optional]] [--auth-order mtls,oidc,grant,token]
//	pigeon broker start [serve's flags]
//	pigeon demo
//	pigeon policy lint DIR
//	pigeon catalog asyncapi DIR
//	pigeon publish --subject S [--data JSON | --file F] [flags]
//	pigeon subscribe --subject S [flags]
//	pigeon quarantine list|show ID|release ID [flags]
//	pigeon program deploy NAME --module F.wasm --manifest F.json | list | show NAME | remove NAME | rollback NAME [--version N] [flags]
//	pigeon subject purge NAME [flags]
//	pigeon grant issue --account ID --role R [--role R2 …] [--ttl 1h] | revoke JTI [flags]
//	pigeon account list | show ID | create ID [--role R …] | delete ID | role add|remove ID ROLE [flags]
//	pigeon role list | show NAME | put NAME --file F.json | delete NAME [flags]
//	pigeon audit verify --data DIR [--anchor SEQ:HASH] | --store nats://host:4222[,…]
//	pigeon audit tail [--from N] [--follow]
//	pigeon audit receipts [--data DIR | --url URL --token T] [--max N] [--after AUDITSEQ:SEQ] MESSAGE_ID
//
// Client commands reach a running server with --url (default $PIGEON_URL,
// else http://127.0.0.1:8787) and --token (default $PIGEON_TOKEN); for an
// https:// server --tls-ca, and for mTLS --tls-cert and --tls-key
// (docs/identity.md). serve
// listens on 127.0.0.1:$PORT when PORT is set and keeps its data in
// $PIGEON_DATA_DIR when that is set, as the reference broker does; a flag
// wins over the environment.
//
// Main may run concurrently with itself when each call has its own Store
// values; the commands write only to the stdout and stderr they are given.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
)

const usage = `usage: pigeon <command> [flags]

commands:
  serve                       run the broker (the demo catalog when --policies is not given)
  broker start                the same as serve
  demo                        narrate the adoption path on an embedded broker (no network)
  policy lint DIR             check a policy directory (exit 1 on errors)
  catalog asyncapi DIR        print a policy directory as an AsyncAPI 3 document (JSON)
  publish                     publish one message
  subscribe                   stream deliveries as JSON lines until interrupted
  quarantine list|show|release
                              review quarantined messages (role auditor)
  program deploy|list|show|remove|rollback
                              manage programs bound to routes (role admin or programs)
  subject purge NAME          remove every retained message of a subject no longer in the catalog (role admin)
  grant issue|revoke          issue a grant token for roles of an account, or revoke one by its jti (role admin)
  account list|show|create|delete, account role add|remove
                              manage accounts and the roles they hold (role admin)
  role list|show|put|delete   manage roles and their permissions (role admin)
  audit verify --data DIR     verify the audit chain of a data directory, offline
  audit tail                  print audit records as JSON lines (role auditor)
  audit receipts --data DIR ID  who was handed message ID and acknowledged it, offline,
                              or from a running server with --url (at most 10,000
                              receipts; --max N, --after for the next page)

Run "pigeon <command> -h" for the flags of a command.

Ctrl-C (SIGINT) or SIGTERM stops a command (serve shuts down gracefully); a
second one stops it at once, with exit status 130 (SIGINT) or 143 (SIGTERM).

environment (a flag wins over it):
  PORT                        serve: listen on 127.0.0.1:$PORT
  PIGEON_DATA_DIR             serve: the data directory
  PIGEON_URL                  client commands: the server URL
  PIGEON_TOKEN                client commands: the bearer token
  PIGEON_CA, PIGEON_CERT, PIGEON_KEY
                              client commands: the CA bundle of an https:// server, and a client certificate and key for mTLS
`

// Run is the whole program: Main over the process's arguments, standard
// output and error, until it ends or the process gets SIGINT or SIGTERM
// (serve then shuts down). A second SIGINT or SIGTERM ends the process at
// once, with status 130 or 143 (128 + the signal's number), for a
// command that the first did not stop. A command's main is
// os.Exit(cli.Run(...)).
func Run(opts ...Option) int {
	ctx, stop := signalContext(context.Background(), os.Stderr, os.Exit)
	defer stop()
	return Main(ctx, os.Args[1:], os.Stdout, os.Stderr, opts...)
}

// Main runs the command line args (without the program name) until it
// ends or ctx does (serve then shuts down), and returns its exit code: 0,
// 1 when the command failed, 2 when the command line is wrong.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, opts ...Option) int {
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	sub := ""
	if len(rest) > 0 {
		sub = rest[0]
	}
	switch {
	case cmd == "serve":
		return serveCmd(ctx, o, rest, stdout, stderr)
	case cmd == "broker" && sub == "start":
		return serveCmd(ctx, o, rest[1:], stdout, stderr)
	case cmd == "demo":
		return demoCmd(ctx, rest, stdout, stderr)
	case cmd == "catalog":
		return catalogCmd(rest, stdout, stderr)
	case cmd == "policy" && sub == "lint":
		return policyLintCmd(rest[1:], stdout, stderr)
	case cmd == "publish":
		return publishCmd(ctx, rest, stdout, stderr)
	case cmd == "subscribe":
		return subscribeCmd(ctx, rest, stdout, stderr)
	case cmd == "quarantine" && (sub == "list" || sub == "show" || sub == "release"):
		return quarantineCmd(ctx, sub, rest[1:], stdout, stderr)
	case cmd == "program" && (sub == "deploy" || sub == "list" || sub == "show" || sub == "remove" || sub == "rollback"):
		return programCmd(ctx, sub, rest[1:], stdout, stderr)
	case cmd == "subject" && sub == "purge":
		return subjectPurgeCmd(ctx, rest[1:], stdout, stderr)
	case cmd == "grant" && (sub == "issue" || sub == "revoke"):
		return grantCmd(ctx, sub, rest[1:], stdout, stderr)
	case cmd == "account" && (sub == "list" || sub == "show" || sub == "create" || sub == "delete" || sub == "role"):
		return accountCmd(ctx, sub, rest[1:], stdout, stderr)
	case cmd == "role" && (sub == "list" || sub == "show" || sub == "put" || sub == "delete"):
		return roleCmd(ctx, sub, rest[1:], stdout, stderr)
	case cmd == "audit" && sub == "verify":
		return auditVerifyCmd(ctx, o, rest[1:], stdout, stderr)
	case cmd == "audit" && sub == "receipts":
		return auditReceiptsCmd(ctx, rest[1:], stdout, stderr)
	case cmd == "audit" && sub == "tail":
		return auditTailCmd(ctx, rest[1:], stdout, stderr)
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "pigeon: unknown command %q\n\n%s", joinArgs(args), usage)
	return 2
}

func joinArgs(args []string) string {
	if len(args) > 1 {
		return args[0] + " " + args[1]
	}
	return args[0]
}
