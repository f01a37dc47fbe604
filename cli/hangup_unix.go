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
// the client CAs, on every SIGHUP until ctx ends; once the client CAs are
// reloaded it checks the open connections again with reauth (hangup).
func reloadOnHangup(ctx context.Context, cf *identity.CertFile, cas func() error, reauth func(context.Context) (int, error), logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			hangup(ctx, cf, cas, reauth, logger)
		}
	}
}
