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

// reloadOnHangup reloads the server certificate on every SIGHUP until ctx
// ends.
func reloadOnHangup(ctx context.Context, cf *identity.CertFile, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := cf.Reload(); err == nil {
				logger.Info("pigeon: SIGHUP: certificate reloaded")
			}
		}
	}
}
