package programs_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
	"pigeon/programs"
)

// A program's message whose lineage was forgotten (more than
// Options.LineageSize program messages were published after it: a
// backlog) may emit nothing: a conservative depth instead would let an
// amplifier whose backlog outgrows LineageSize start over at each
// forgetting. Its emits were refused PROGRAM_LIMIT_EXCEEDED, the code
// of a hop too deep, and nothing told the operator that the bound
// refusing the work was LineageSize, not MaxHops. The refusal now logs a
// warning naming it (at most one a minute).
func TestForgottenLineageRefusalIsLogged(t *testing.T) {
	f := newFixture(t, nil)
	logs := &testlog.Buffer{}
	mg, err := programs.New(context.Background(), f.e, &programs.Options{KV: f.st, Cache: cache, MaxHops: 3, MaxDescendants: -1, LineageSize: 1,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
	_, err = mg.Deploy(context.Background(), admin, "twice", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.in"} }),
		emitTwiceModule(loopMsg))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return hopRefusals(t, f, "twice") > 0 }, "an emit is refused")
	eventually(t, func() bool { return strings.Contains(logs.String(), "handles was forgotten") }, "the forgotten lineage's refusal is not logged")
	require.Equal(t, 1, strings.Count(logs.String(), "handles was forgotten"), "at most one warning a minute")
	require.Contains(t, logs.String(), `"lineageSize":1`)
}
