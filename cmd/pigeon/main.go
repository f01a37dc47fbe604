// Command pigeon runs a standalone Pigeon broker and talks to one; the
// commands are package pigeon/cli's ("pigeon help" lists them). A --store
// nats:// URL hands serve and audit verify to pigeon-cluster
// (docs/cluster.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"pigeon/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
