package programs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

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
	out     *logBudget // the instance's
	emitted int
	hop     hop // the delivered message's place in its lineage
	// overLimit is set when the program tried to emit beyond its limit;
	// the call is then aborted.
	overLimit bool
}

type callKey struct{}

// errEmitLimit aborts a call that emitted more than its limit.
var errEmitLimit = errors.New("programs: the emitted-messages limit was reached")

// errCallOver aborts a call whose time (limits.timeoutMs) is up when it
// calls the host again.
var errCallOver = errors.New("programs: the message's time is up")

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
		return writeCode(mod, st, pigeon.CodeInvalidArgument) // called from the initializer or pigeon_alloc
	}
	if ctx.Err() != nil {
		// The call's time is up (a write the host waited for used it):
		// it emits nothing more, and leaves nothing more to wait for.
		panic(errCallOver)
	}
	c.emitted++
	if c.emitted > c.v.man.Limits.MaxEmits {
		c.overLimit = true
		panic(errEmitLimit)
	}
	// A message is bounded as a transport bounds a frame or a body,
	// before it is read: decoding copies it (and its data again) onto the
	// broker's heap, outside the program's memory limit.
	if n := uint32(st[1]); int64(n) > int64(c.v.maxMessage) {
		return c.refuse(ctx, mod, st, pigeon.CodePayloadTooLarge)
	}
	b, ok := mod.Memory().Read(uint32(st[0]), uint32(st[1]))
	if !ok {
		return c.refuse(ctx, mod, st, pigeon.CodeEnvelopeInvalid)
	}
	// The broker's own copy: nothing it decodes, judges or keeps is a view
	// of memory the program writes once the call returns.
	m, err := pigeon.DecodeMessage(bytes.Clone(b)) // refuses what a transport would: two members of one name, a name in another case
	if err != nil {
		return c.refuse(ctx, mod, st, pigeon.ErrorCode(err))
	}
	if reply {
		// Only a request is answered: on a work-queue or pubsub subject
		// the engine would take the "reply" for a publish into the very
		// subject the program handles, delivered back to it, answered
		// again, without end, from a single message.
		if sp, err := c.v.e.Subject(c.d.Message.Subject); err != nil || sp.Mode != pigeon.ModeRequestReply {
			return c.refuse(ctx, mod, st, pigeon.CodeInvalidArgument)
		}
		m.Subject, m.CorrelationID = c.d.Message.Subject, c.d.Message.ID
	}
	// One message's descendants are bounded in depth and in number,
	// wherever their programs publish them (lineage).
	if !c.v.lin.admit(c.hop) {
		if c.hop.lost && c.v.lin.lostWarn(time.Now()) {
			c.v.log.Warn("program message refused: the lineage of the message it handles was forgotten, "+
				"more program messages were published after it than the Manager remembers (programs.Options.LineageSize)",
				"lineageSize", c.v.lin.size, "subject", cut(c.d.Message.Subject, pigeon.MaxEnvelopeField), "message", c.d.Message.ID)
		}
		return c.refuse(ctx, mod, st, pigeon.CodeProgramLimit)
	}
	// When the account is gone, its contract goes too: Publish refuses
	// the message CONTRACT_REVOKED (audited) and the binding ends. When
	// the call's time ran out before the revocation was written, the
	// message is refused as Publish would refuse it, and the revocation
	// goes on.
	if gone, revoked := accountGone(ctx, c.v.e, c.v.wg, c.caller); gone && !revoked {
		c.v.lin.unadmit(c.hop)
		return writeCode(mod, st, pigeon.CodeContractRevoked)
	}
	// The depth travels with the message: the broker writes the caller's
	// Hops into it, so a Manager on another node, which remembers nothing
	// of this lineage, goes on from this depth rather than from 0.
	caller := c.caller
	caller.Hops = c.hop.hops()
	res, err := c.v.e.Publish(ctx, caller, m)
	if err != nil {
		c.v.lin.unadmit(c.hop)
		// The subject as the program wrote it: the decoder does not bound
		// it (a gate refuses one over pigeon.MaxEnvelopeField), so it is
		// cut, as a program's own log line is.
		c.v.log.Debug("program message refused", "code", pigeon.ErrorCode(err), "subject", cut(m.Subject, pigeon.MaxEnvelopeField))
		return writeCode(mod, st, pigeon.ErrorCode(err))
	}
	if res.Status != pigeon.StatusDuplicate {
		c.v.lin.published(c.hop, res.Message)
	}
	return 0
}

// refuse refuses a message the engine never saw (too large, out of the
// program's memory, no envelope): audited publish.denied under the
// program's principal, as the engine audits its own refusals, and its
// code written for the program. The call waits for the record while its
// time lasts, never longer: the record is written all the same.
func (c *call) refuse(ctx context.Context, mod api.Module, st []uint64, code pigeon.Code) uint64 {
	c.v.log.Debug("program message refused", "code", code, "size", uint32(st[1]))
	rec := pigeon.AuditRecord{Principal: c.caller.Principal.ID, ContractID: c.caller.ContractID, Ref: c.v.ref()}
	settle(ctx, c.v.wg, func(ctx context.Context) {
		_ = c.v.e.Record(ctx, pigeon.EventPublishDenied, code, rec)
	})
	return writeCode(mod, st, code)
}

// settle runs write (a store write that must not be lost: an audit
// record, a revocation) on a goroutine of its own, tracked by wg, under
// ctx without its cancellation, and waits for it while ctx lasts. It
// reports whether write finished. A host call waits under its call's
// context: a slow durable or clustered store never holds the call past
// limits.timeoutMs, and what the call had to write is written all the
// same.
func settle(ctx context.Context, wg *sync.WaitGroup, write func(context.Context)) bool {
	done := make(chan struct{})
	wctx := context.WithoutCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		write(wctx)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// writeCode writes code at st[2] (at most st[3] bytes) and returns the
// bytes written, or code's whole length when none could be (st[3] is 0,
// or st[2] is outside the memory): never 0, which means accepted. The
// capacity is compared as the unsigned 32 bits the program passed, never
// as an int (negative on 32-bit platforms from 2³¹ on).
func writeCode(mod api.Module, st []uint64, code pigeon.Code) uint64 {
	b := []byte(code)
	if c := uint64(uint32(st[3])); c < uint64(len(b)) {
		b = b[:c]
	}
	if len(b) == 0 || !mod.Memory().Write(uint32(st[2]), b) {
		return uint64(len(code))
	}
	return uint64(len(b))
}

// Bounds of a program's log output (pigeon.log, standard output and
// error): each line is cut at maxLogLine bytes, and one delivery (or an
// instance's start) writes at most maxLogLines lines; the rest is dropped,
// with one warning. Without them a program could copy its whole memory
// onto the broker's heap and into its log at each call, as often as its
// time limit lets it.
const (
	maxLogLine  = 4 << 10
	maxLogLines = 256
)

// logBudget counts the lines an instance logged in its current delivery
// (or its start). An instance runs one call at a time.
type logBudget struct {
	lines int
}

// take reports whether one more line may be written, warning once when
// the budget runs out.
func (lb *logBudget) take(log *slog.Logger) bool {
	lb.lines++
	if lb.lines == maxLogLines+1 {
		log.Warn("program log output dropped: more lines than allowed in one delivery", "limit", maxLogLines)
	}
	return lb.lines <= maxLogLines
}

// logLine is b cut at maxLogLine bytes (at a rune's start), as a string.
func logLine(b []byte) string {
	if len(b) <= maxLogLine {
		return string(b)
	}
	n := maxLogLine
	for n > maxLogLine-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

// cut is s cut at n bytes (at a rune's start), marked "…" when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// hostLog writes the guest's message to the program's logger.
func hostLog(ctx context.Context, mod api.Module, st []uint64) {
	v, lb := loggerOf(ctx)
	if v == nil || !lb.take(v.log) {
		return
	}
	b, ok := mod.Memory().Read(uint32(st[1]), min(uint32(st[2]), maxLogLine+1))
	if !ok {
		return
	}
	v.log.Log(ctx, logLevel(int32(st[0])), logLine(b))
}

// logLevel is the level a program logs at, held between debug and error:
// a program's line never takes a level above the broker's own errors
// (one an operator's alerting may page on, as a fatal or critical one),
// nor one below debug.
func logLevel(l int32) slog.Level {
	return slog.Level(min(max(l, int32(slog.LevelDebug)), int32(slog.LevelError)))
}

// loggerOf is the version running ctx's call, or the one starting, with
// the instance's log budget.
func loggerOf(ctx context.Context) (*version, *logBudget) {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c.v, c.out
	}
	if s, ok := ctx.Value(startKey{}).(starting); ok {
		return s.v, s.out
	}
	return nil, nil
}

// starting is what the host functions find of an instance that starts.
type starting struct {
	v   *version
	out *logBudget
}

type startKey struct{}

// logWriter is a program's stdout or stderr: each write is one log line,
// counted against the instance's budget.
type logWriter struct {
	log    *slog.Logger
	stream string
	out    *logBudget
}

func (w logWriter) Write(b []byte) (int, error) {
	if w.out.take(w.log) {
		w.log.Info("program output", "stream", w.stream, "text", logLine(b))
	}
	return len(b), nil
}
