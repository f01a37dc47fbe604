package programs_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// memoryFill is the instruction memory.fill (bulk memory) on memory 0.
var memoryFill = []byte{0xfc, 0x0b, 0x00}

const opDrop = 0x1a

// A program's message is bounded before the broker reads it, as a
// transport bounds a frame: one over Options.MaxMessageSize (1 MiB by
// default) is refused PAYLOAD_TOO_LARGE and audited under the program's
// principal, rather than decoded (and its data copied again) onto the
// broker's heap, beyond the program's own memory limit, up to maxEmits
// times a delivery.
func TestProgramMessageSizeIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	out := f.collect(t, "orders.out")
	const at, size = 64 << 10, 2 << 20 // the message lives above the delivered one, 2 MiB of data
	head := `{"type":"order","subject":"orders.out","intent":"record","classification":"internal","data":{"s":"`
	tail := `"}}`
	fill := at + len(head)
	total := len(head) + size + len(tail)
	m := abiModule(cat(
		i32c(int64(fill)), i32c('a'), i32c(size), memoryFill,
		i32c(at), i32c(int64(total)), i32c(512), i32c(64), []byte{opCall, 0}), uint32((at+total)>>16+1))
	m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	m.data = []wdata{{offset: at, bytes: []byte(head)}, {offset: int64(fill + size), bytes: []byte(tail)}}
	_, err := f.mg.Deploy(ctx, admin, "big", manifest(), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	deadline := time.After(30 * time.Second)
	for len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 0 {
		select {
		case m := <-out:
			require.Failf(t, "a message beyond the bound was taken", "%d bytes of data", len(m.Data))
		case <-deadline:
			t.Fatal("the delivery was never given up")
		case <-time.After(5 * time.Millisecond):
		}
	}
	var denied int
	for _, r := range f.audited(t, pigeon.EventPublishDenied) {
		if r.Code == string(pigeon.CodePayloadTooLarge) {
			require.Equal(t, progAcc, r.Principal)
			require.Equal(t, "program:big@1", r.Ref)
			denied++
		}
	}
	require.Equal(t, 2, denied, "each attempt's refusal is audited")

	// Options.MaxMessageSize sets the bound: a message at it goes, one a
	// byte over is refused.
	require.NoError(t, f.mg.Remove(ctx, admin, "big"))
	small := `{"type":"order","subject":"orders.out","intent":"record","data":{"n":1}}`
	mg, _ := loggedManager(t, f, programs.Options{MaxMessageSize: len(small)})
	_, err = mg.Deploy(ctx, admin, "fits", manifest(group("fits")), emitModule("publish", small))
	require.NoError(t, err)
	_, err = mg.Deploy(ctx, admin, "over", manifest(group("over")), emitModule("publish", small+" "))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":2}`)
	require.JSONEq(t, `{"n":1}`, string(next(t, out).Data))
	// A new group starts at the queue's first message: "over" fails
	// both, as "big" failed the first.
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 3 }, "the larger one is refused")
}

// A program's log output (pigeon.log, standard output and error) is
// bounded: each line at 4 KiB, and 256 lines a delivery, then one
// warning; otherwise a program copies its whole memory into the broker's
// heap and log at each call, as often as its time limit lets it.
func TestProgramLogOutputIsBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggedManager(t, f, programs.Options{})
	const at, size, calls = 2048, 62 << 10, 200
	iov := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, at), size)
	code := cat(i32c(at), i32c('a'), i32c(size), memoryFill)
	for range calls {
		code = cat(code,
			i32c(0), i32c(at), i32c(size), []byte{opCall, 0}, // log(0, at, size)
			i32c(1), i32c(0), i32c(1), i32c(8), []byte{opCall, 1, opDrop}) // fd_write(stdout, iov, 1, &n)
	}
	m := abiModule(cat(code, i32c(0)), 1)
	m.imports = []wimport{
		{module: "pigeon", name: "log", params: []byte{tI32, tI32, tI32}},
		{module: "wasi_snapshot_preview1", name: "fd_write", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}},
	}
	m.data = []wdata{{offset: 0, bytes: iov}}
	_, err := mg.Deploy(ctx, admin, "chatty", manifest(), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the delivery is handled")
	var lines, dropped int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Text string `json:"text"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		switch {
		case strings.HasPrefix(rec.Msg, "aaaa"), rec.Msg == "program output":
			lines++
			require.LessOrEqual(t, len(rec.Msg)+len(rec.Text), 4<<10+len("program output")+len("…"), "a line is cut")
		case strings.Contains(rec.Msg, "log output dropped"):
			dropped++
		}
	}
	require.Equal(t, 256, lines, "at most 256 lines a delivery")
	require.Equal(t, 1, dropped, "one warning")
}
