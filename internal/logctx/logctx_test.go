package logctx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/logctx"
)

func TestHandlerAddsTheID(t *testing.T) {
	var buf bytes.Buffer
	h := logctx.Handler(slog.NewJSONHandler(&buf, nil))
	require.Equal(t, h, logctx.Handler(h), "wrapping twice adds the id once")
	log := slog.New(h).With("component", "test")
	log.InfoContext(logctx.With(context.Background(), "r-1"), "one", "n", 1)
	log.Info("two")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 2)
	var one, two map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &one))
	require.NoError(t, json.Unmarshal(lines[1], &two))
	require.Equal(t, "r-1", one[logctx.Key])
	require.Equal(t, "test", one["component"])
	require.NotContains(t, two, logctx.Key)
}
