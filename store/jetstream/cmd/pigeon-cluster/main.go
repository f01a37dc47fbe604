// Command pigeon-cluster is the pigeon command (package pigeon/cli) with
// --store nats://host:4222[,…]: serve runs a node of a NATS JetStream
// cluster, with every flag of `pigeon serve` (TLS, mTLS, OIDC, --config,
// metrics, console, programs) plus the cluster's own, and audit verify
// checks every node's audit chain offline. `pigeon serve --store nats://…`
// and `pigeon audit verify --store nats://…` hand their command to it
// (docs/cluster.md).
//
//	pigeon-cluster serve --store nats://host:4222[,…] --node NAME [--replicas 3] [--prefix PIGEON]
//	                     [--nats-creds FILE | --nats-user U --nats-password P | --nats-token T] [--nats-tls-ca FILE]
//	                     [every flag of pigeon serve]
//	pigeon-cluster audit verify --store nats://host:4222[,…] [--prefix PIGEON] [credential flags]
package main

import (
	"context"
	"io"
	"os"

	"pigeon/cli"
)

func main() { os.Exit(cli.Run(withNATS())) }

// withNATS adds the NATS JetStream store for nats:// and tls:// URLs.
func withNATS() cli.Option { return cli.WithStore(&natsStore{}, "nats", "tls") }

// run is cli.Main with the NATS JetStream store.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Main(ctx, args, stdout, stderr, withNATS())
}
