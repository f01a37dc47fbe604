package programs

import (
	"context"
	"errors"
	"log/slog"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"pigeon"
)

// call is the state of one delivery being handled: the host functions
// find it in their context.
type call struct {
	v       *version
	caller  pigeon.Caller
	d       *pigeon.Delivery
	emitted int
	// overLimit is set when the program tried to emit beyond its limit;
	// the call is then aborted.
	overLimit bool
}

type callKey struct{}

// errEmitLimit aborts a call that emitted more than its limit.
var errEmitLimit = errors.New("programs: the emitted-messages limit was reached")

// instantiateHost defines the host module on rt.
func instantiateHost(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(hostModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, st []uint64) {
		st[0] = emit(ctx, m, st, false)
	}), sigEmit.params, sigEmit.results).Export("publish")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, st []uint64) {
		st[0] = emit(ctx, m, st, true)
	}), sigEmit.params, sigEmit.results).Export("reply")
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(hostLog), sigLog.params, sigLog.results).Export("log")
	_, err := b.Instantiate(ctx)
	return err
}

// emit publishes (or, with reply, answers the delivery with) the message
// at st[0], st[1] and returns 0, or the length of the refusal's code
// written at st[2] (at most st[3] bytes).
func emit(ctx context.Context, mod api.Module, st []uint64, reply bool) uint64 {
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return writeCode(mod, st, pigeon.CodeInvalidArgument) // called from the initializer
	}
	c.emitted++
	if c.emitted > c.v.man.Limits.MaxEmits {
		c.overLimit = true
		panic(errEmitLimit)
	}
	b, ok := mod.Memory().Read(uint32(st[0]), uint32(st[1]))
	if !ok {
		return writeCode(mod, st, pigeon.CodeEnvelopeInvalid)
	}
	m, err := pigeon.DecodeMessage(b) // refuses what a transport would: two members of one name, a name in another case
	if err != nil {
		return writeCode(mod, st, pigeon.ErrorCode(err))
	}
	if reply {
		m.Subject, m.CorrelationID = c.d.Message.Subject, c.d.Message.ID
	}
	if _, err := c.v.e.Publish(ctx, c.caller, m); err != nil {
		c.v.log.Debug("program message refused", "code", pigeon.ErrorCode(err), "subject", m.Subject)
		return writeCode(mod, st, pigeon.ErrorCode(err))
	}
	return 0
}

// writeCode writes code at st[2] (at most st[3] bytes) and returns its length.
func writeCode(mod api.Module, st []uint64, code pigeon.Code) uint64 {
	b := []byte(code)[:min(len(code), int(uint32(st[3])))]
	if !mod.Memory().Write(uint32(st[2]), b) {
		return uint64(len(code))
	}
	return uint64(len(b))
}

// hostLog writes the guest's message to the program's logger.
func hostLog(ctx context.Context, mod api.Module, st []uint64) {
	b, ok := mod.Memory().Read(uint32(st[1]), uint32(st[2]))
	if !ok {
		return
	}
	v := loggerOf(ctx)
	if v == nil {
		return
	}
	v.log.Log(ctx, slog.Level(int32(st[0])), string(b))
}

// loggerOf is the version running ctx's call, or the one starting.
func loggerOf(ctx context.Context) *version {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c.v
	}
	v, _ := ctx.Value(versionKey{}).(*version)
	return v
}

type versionKey struct{}

// logWriter is a program's stdout or stderr: each write is one log line.
type logWriter struct {
	log    *slog.Logger
	stream string
}

func (w logWriter) Write(b []byte) (int, error) {
	w.log.Info("program output", "stream", w.stream, "text", string(b))
	return len(b), nil
}
