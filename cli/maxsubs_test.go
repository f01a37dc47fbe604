package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
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

// serve --max-stored-groups (max_stored_groups in the config file) caps
// the consumer groups whose progress the store keeps per subject: parsed
// from either, and in force on a real connection, where a cap of one
// refuses a second group name with TOO_MANY_GROUPS while the first takes
// subscribers still.
func TestServeMaxStoredGroups(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--max-stored-groups", "3"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 3, cfg.maxStoredGroups)
	_, code, ok := parseServe([]string{"--max-stored-groups", "lots"}, io.Discard, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("max_stored_groups: -1\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, -1, cfg.maxStoredGroups)

	ctx := context.Background()
	r := startServe(t, serveConfig{maxStoredGroups: 1})
	url := "ws" + strings.TrimPrefix(r.url, "http") + "/v1/ws"
	sub, err := ws.Dial(ctx, url, "notifier-token", []string{"notifications.send"})
	require.NoError(t, err)
	defer sub.Close(ctx)
	pub, err := ws.Dial(ctx, url, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	defer pub.Close(ctx)
	handled := make(chan struct{}, 1)
	h := func(context.Context, *pigeon.Delivery) error {
		select {
		case handled <- struct{}{}:
		default:
		}
		return nil
	}
	// The first group acks a message: its progress is in the store.
	first, err := sub.Subscribe(ctx, "notifications.send", h, pigeon.WithGroup("first"))
	require.NoError(t, err)
	_, err = pub.Publish(ctx, demo.Notification("stored-groups-1"))
	require.NoError(t, err)
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group never got the message")
	}
	require.NoError(t, first.Unsubscribe(ctx)) // its ack is flushed with it
	_, err = sub.Subscribe(ctx, "notifications.send", h, pigeon.WithGroup("second"))
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe, "a second group name beyond --max-stored-groups 1")
	require.Equal(t, pigeon.CodeTooManyGroups, pe.Code)
	again, err := sub.Subscribe(ctx, "notifications.send", h, pigeon.WithGroup("first"))
	require.NoError(t, err, "the group the store keeps takes subscribers still")
	require.NoError(t, again.Unsubscribe(ctx))
}
