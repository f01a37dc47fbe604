//go:build !unix

package cli

import (
	"context"
	"log/slog"

	"pigeon/identity"
)

// reloadOnHangup does nothing where there is no SIGHUP: the certificate
// is still reloaded when its files change.
func reloadOnHangup(ctx context.Context, _ *identity.CertFile, _ func() error, _ func(context.Context) (int, error), _ *slog.Logger) {
	<-ctx.Done()
}
