//go:build unix

package cli

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"pigeon/identity"
)

// reloadOnHangup reloads the server certificate, and with cas (not nil)
// the client CAs, on every SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, cf *identity.CertFile, cas func() error, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload(cf, cas, logger)
		}
	}
}
