package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// serve --max-subscriptions and --max-groups (or max_subscriptions and
// max_groups in the config file) cap the subscriptions one principal runs
// and the consumer groups of a subject: parsed from either, and the first
// in force on a real connection, where a cap of one refuses the second
// subscription with TOO_MANY_SUBSCRIPTIONS.
func TestServeMaxSubscriptions(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--max-subscriptions", "7", "--max-groups", "9"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 7, cfg.maxSubs)
	require.Equal(t, 9, cfg.maxGroups)
	_, code, ok := parseServe([]string{"--max-subscriptions", "many"}, io.Discard, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("max_subscriptions: -1\nmax_groups: 5\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, -1, cfg.maxSubs)
	require.Equal(t, 5, cfg.maxGroups)

	ctx := context.Background()
	r := startServe(t, serveConfig{maxSubs: 1})
	s, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(r.url, "http")+"/v1/ws", "gateway-token", []string{"payments.authorize"})
	require.NoError(t, err)
	defer s.Close(ctx)
	h := func(context.Context, *pigeon.Delivery) error { return nil }
	_, err = s.Subscribe(ctx, "payments.authorize", h)
	require.NoError(t, err)
	_, err = s.Subscribe(ctx, "payments.authorize", h)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeTooManySubscriptions, pe.Code)
}
