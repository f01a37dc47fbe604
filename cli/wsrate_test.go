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
	"pigeon/demo"
	"pigeon/transport/ws"
)

// serve --ws-publish-rate (or ws_publish_rate in the config file) sets how
// many messages one WebSocket connection may publish a second: parsed
// from either, and in force on a real connection, where a rate of one
// refuses the second publish of a burst with RATE_LIMITED.
func TestServeWSPublishRate(t *testing.T) {
	cfg, _, ok := parseServe([]string{"--ws-publish-rate", "250.5"}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, 250.5, cfg.wsPublishRate)
	_, code, ok := parseServe([]string{"--ws-publish-rate", "fast"}, io.Discard, nil)
	require.False(t, ok)
	require.Equal(t, 2, code)
	file := filepath.Join(t.TempDir(), "pigeon.yaml")
	require.NoError(t, os.WriteFile(file, []byte("ws_publish_rate: -1\n"), 0o600))
	cfg, _, ok = parseServe([]string{"--config", file}, io.Discard, nil)
	require.True(t, ok)
	require.Equal(t, -1.0, cfg.wsPublishRate)

	ctx := context.Background()
	r := startServe(t, serveConfig{wsPublishRate: 1})
	s, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(r.url, "http")+"/v1/ws", "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	defer s.Close(ctx)
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-2"))
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeRateLimited, pe.Code)
}

// A rate that is not a number (NaN) or is infinite is refused, from the
// flag and from the config file: NaN turned the limiter's arithmetic into
// NaN, and +Inf made a burst of one with no limit at all.
func TestServeWSPublishRateMustBeFinite(t *testing.T) {
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "1e400"} {
		var stderr strings.Builder
		_, code, ok := parseServe([]string{"--ws-publish-rate", v}, &stderr, nil)
		require.False(t, ok, v)
		require.Equal(t, 2, code, v)
		require.Contains(t, stderr.String(), "ws-publish-rate", v)
	}
	for _, v := range []string{".nan", ".inf", "-.Inf"} {
		var stderr strings.Builder
		file := writeConfig(t, "ws_publish_rate: "+v+"\n")
		_, code, ok := parseServe([]string{"--config", file}, &stderr, nil)
		require.False(t, ok, v)
		require.Equal(t, 2, code, v)
		require.Contains(t, stderr.String(), file+":1: ws_publish_rate", v)
	}
}
