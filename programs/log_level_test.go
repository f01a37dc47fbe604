package programs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
	"pigeon/programs"
)

// pigeon.log takes any i32 as its level, and the line went to the broker's
// log at it: a program could write lines above the broker's own errors
// ("ERROR+1073741816", or 12, a level handlers and alerting take for
// fatal or critical) and page the operator at will, or below debug. The
// level is held between debug (-4) and error (8); levels inside keep
// theirs.
func TestProgramLogLevelIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggingManager(t, f, slog.Level(-1<<31))

	levels := []struct {
		level int64
		want  string
	}{
		{1 << 30, "ERROR"},
		{12, "ERROR"},
		{8, "ERROR"},
		{2, "INFO+2"},
		{-4, "DEBUG"},
		{-8, "DEBUG"},
		{-1 << 31, "DEBUG"},
	}
	var code []byte
	m := abiModule(nil, 1)
	for i, l := range levels {
		text := "line-" + string(rune('a'+i))
		at := int64(64 * (i + 1))
		m.data = append(m.data, wdata{offset: at, bytes: []byte(text)})
		code = cat(code, i32c(l.level), i32c(at), i32c(int64(len(text))), []byte{opCall, 0})
	}
	m.funcs[1].code = cat(code, i32c(0))
	m.imports = []wimport{{module: "pigeon", name: "log", params: []byte{tI32, tI32, tI32}}}
	_, err := mg.Deploy(ctx, admin, "levels", manifest(), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the delivery is handled")

	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Msg, Level string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if strings.HasPrefix(rec.Msg, "line-") {
			got[rec.Msg] = rec.Level
		}
	}
	for i, l := range levels {
		require.Equal(t, l.want, got["line-"+string(rune('a'+i))], "level %d", l.level)
	}
}

// loggingManager is a Manager on f's engine logging JSON lines at level
// and above into the buffer it returns.
func loggingManager(t *testing.T, f *fixture, level slog.Level) (*programs.Manager, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	mg, err := programs.New(context.Background(), f.e, &programs.Options{KV: f.st, Cache: cache,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
	return mg, logs
}
