// Command pigeon-cluster runs a Pigeon node against a NATS JetStream
// cluster, and verifies a cluster's audit chains offline. `pigeon serve
// --store nats://…` and `pigeon audit verify --store nats://…` hand their
// command to it (docs/cluster.md).
//
//	pigeon-cluster serve --store nats://host:4222[,…] --node NAME [--replicas 3] [--prefix PIGEON]
//	                     [--nats-creds FILE | --nats-user U --nats-password P | --nats-token T] [--nats-tls-ca FILE]
//	                     [--addr 127.0.0.1:8787] [--policies DIR --tokens FILE] [--region uk]
//	pigeon-cluster audit verify --store nats://host:4222[,…] [--prefix PIGEON] [credential flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"pigeon/store/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  pigeon-cluster serve --store nats://host:4222[,...] --node NAME [flags]
  pigeon-cluster audit verify --store nats://host:4222[,...] [flags]`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) >= 1 && args[0] == "serve":
		return serveCmd(ctx, args[1:], stdout, stderr)
	case len(args) >= 2 && args[0] == "audit" && args[1] == "verify":
		return verifyCmd(ctx, args[2:], stdout, stderr)
	}
	fmt.Fprintln(stderr, usage)
	return 2
}

// natsFlags are the connection flags both commands take.
type natsFlags struct {
	url, prefix, creds, user, password, token, tlsCA string
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "store", "", "NATS URLs of the cluster, comma-separated (nats://host:4222,nats://host2:4222)")
	fs.StringVar(&n.prefix, "prefix", "PIGEON", "prefix of every stream and bucket: one per Pigeon deployment")
	fs.StringVar(&n.creds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&n.user, "nats-user", "", "NATS user")
	fs.StringVar(&n.password, "nats-password", "", "NATS password (default $NATS_PASSWORD)")
	fs.StringVar(&n.token, "nats-token", "", "NATS token (default $NATS_TOKEN)")
	fs.StringVar(&n.tlsCA, "nats-tls-ca", "", "CA bundle (PEM) that signs the NATS servers' certificates")
}

func (n *natsFlags) options() []nats.Option {
	var o []nats.Option
	if n.creds != "" {
		o = append(o, nats.UserCredentials(n.creds))
	}
	if n.password == "" {
		n.password = os.Getenv("NATS_PASSWORD")
	}
	if n.user != "" {
		o = append(o, nats.UserInfo(n.user, n.password))
	}
	if n.token == "" {
		n.token = os.Getenv("NATS_TOKEN")
	}
	if n.token != "" {
		o = append(o, nats.Token(n.token))
	}
	if n.tlsCA != "" {
		o = append(o, nats.RootCAs(n.tlsCA))
	}
	return append(o, nats.Timeout(5*time.Second))
}

func parse(fs *flag.FlagSet, args []string, n *natsFlags, stderr io.Writer) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pigeon-cluster: unexpected argument %q\n", fs.Arg(0))
		return 2, false
	}
	if n.url == "" {
		fmt.Fprintln(stderr, "pigeon-cluster: --store nats://host:4222[,…] is required")
		return 2, false
	}
	return 0, true
}

func verifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var n natsFlags
	n.register(fs)
	fs.String("data", "", "ignored with --store nats://")
	if code, ok := parse(fs, args, &n, stderr); !ok {
		return code
	}
	nc, err := nats.Connect(n.url, n.options()...)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit verify: cannot reach NATS at %s: %v\n", n.url, err)
		return 1
	}
	defer nc.Close()
	reports, err := jetstream.VerifyAudit(ctx, nc, n.prefix)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit verify: listing the audit chains of %s: %v\n", n.prefix, err)
		return 1
	}
	if len(reports) == 0 {
		fmt.Fprintf(stderr, "pigeon audit verify: no audit chain under prefix %s\n", n.prefix)
		return 1
	}
	code := 0
	for _, r := range reports {
		if r.Err != nil {
			fmt.Fprintf(stderr, "pigeon audit verify: the audit chain of node %s does not hold: %v (%d records verified before it)\n", r.Node, r.Err, r.Records)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "pigeon audit verify: the audit chain of node %s holds: %d records\n", r.Node, r.Records)
	}
	return code
}
