package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// clusterBinary runs a node against a NATS JetStream cluster. The pigeon
// module does not import NATS (embedding pigeon must not pull it in), so
// `pigeon serve --store nats://…` and `pigeon audit verify --store
// nats://…` hand the whole command to this binary, built from the
// store/jetstream module (docs/cluster.md), when Main was given no Store
// for the scheme (pigeon-cluster is Main with one).
const clusterBinary = "pigeon-cluster"

// isClusterStore reports whether a --store value names a NATS cluster.
func isClusterStore(v string) bool {
	return strings.HasPrefix(v, "nats://") || strings.HasPrefix(v, "tls://")
}

// storeFlag finds --store's value in args, as the flag package reads it.
func storeFlag(args []string) string {
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "store" {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// handOff runs pigeon-cluster (found beside this binary, then on PATH)
// with cmd and args, passing its exit code on. ctx ending (a signal) stops
// it with an interrupt, which it handles as serve does.
func handOff(ctx context.Context, cmd []string, args []string, stdout, stderr io.Writer) int {
	bin, err := findClusterBinary()
	if err != nil {
		fmt.Fprintf(stderr, "pigeon %s: --store %s needs the %s binary: %v (build it with `cd store/jetstream && go build -o %s ./cmd/%s`)\n",
			strings.Join(cmd, " "), printable(storeFlag(args)), clusterBinary, printable(err.Error()), clusterBinary, clusterBinary)
		return 2
	}
	c := exec.Command(bin, append(cmd, args...)...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, stdout, stderr
	if err := c.Start(); err != nil {
		fmt.Fprintf(stderr, "pigeon: starting %s: %s\n", printable(bin), printable(err.Error()))
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = c.Process.Signal(os.Interrupt)
		err = <-done
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		fmt.Fprintf(stderr, "pigeon: %s: %s\n", printable(bin), printable(err.Error()))
		return 1
	}
	return 0
}

func findClusterBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), clusterBinary)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(clusterBinary)
}
