// Command pigeon runs a standalone Pigeon broker and talks to one; the
// commands are package pigeon/cli's ("pigeon help" lists them). A --store
// nats:// URL hands serve and audit verify to pigeon-cluster
// (docs/cluster.md).
package main

import (
	"os"

	"pigeon/cli"
)

func main() { os.Exit(cli.Run()) }
