package programs_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A refused message of a program was logged with its subject as the
// program wrote it: the decoder does not bound a subject (the gates
// refuse one over 256 bytes), so a program emitting messages of a
// 512 KiB subject wrote 512 KiB lines to the broker's log, limits.maxEmits
// (up to 1,000) of them at each delivery, beside the 4 KiB a line its own
// output may take. The subject logged is cut as a log line is.
func TestRefusedSubjectInTheLogIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggingManager(t, f, slog.LevelDebug)

	msg := `{"type":"order","subject":"` + strings.Repeat("s", 512<<10) + `","intent":"record","data":{}}`
	const at, emits = 64 << 10, 4
	var code []byte
	for range emits {
		code = cat(code, i32c(at), i32c(int64(len(msg))), i32c(512), i32c(64), []byte{opCall, 0, opDrop})
	}
	m := abiModule(cat(code, i32c(0)), uint32((at+len(msg))>>16+1))
	m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	m.data = []wdata{{offset: at, bytes: []byte(msg)}}
	_, err := mg.Deploy(ctx, admin, "long", manifest(), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the delivery is handled")

	var refused int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		require.Less(t, len(line), 8<<10, "a log line is bounded: %.200s…", line)
		if strings.Contains(line, "program message refused") {
			refused++
		}
	}
	require.Equal(t, emits, refused, "each refusal is logged")
}
