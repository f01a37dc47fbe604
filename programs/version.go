package programs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"pigeon"
)

// startTimeout bounds an instance's initializer.
const startTimeout = 10 * time.Second

// version is one deployed module of a program with its own wazero
// runtime (which caps its memory) and its pool of idle instances.
//
// Deliveries hold mu for reading while they run; retire takes it for
// writing, so it returns once the deliveries in flight on the version
// have finished, and no delivery starts on a retired version.
type version struct {
	e      *pigeon.Engine
	name   string
	number int
	sum    string
	man    Manifest
	log    *slog.Logger
	rt     wazero.Runtime
	cm     wazero.CompiledModule
	idle   chan *instance
	// maxMessage bounds a message the program publishes or replies
	// (Options.MaxMessageSize).
	maxMessage int
	lin        *lineage // the Manager's
	// wg is the Manager's: it tracks the writes a host call leaves
	// running (settle).
	wg *sync.WaitGroup

	mu      sync.RWMutex
	retired bool
}

// instance is one instantiated module, used by one delivery at a time.
type instance struct {
	mod    api.Module
	alloc  api.Function
	handle api.Function
	out    *logBudget // what it logged in its current delivery
}

// newVersion compiles and validates wasm under man and starts one instance
// (which proves its initializer runs). On error nothing is left running.
func newVersion(ctx context.Context, mg *Manager, name string, number int, man Manifest, wasm []byte) (*version, error) {
	sum := sha256.Sum256(wasm)
	v := &version{
		e: mg.e, name: name, number: number, sum: hex.EncodeToString(sum[:]), man: man,
		log:  mg.log.With("program", name, "version", number),
		idle: make(chan *instance, man.Route.MaxInFlight), maxMessage: mg.opts.MaxMessageSize, lin: mg.lin, wg: &mg.wg,
	}
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(man.Limits.MemoryPages).WithCompilationCache(mg.cache)
	if mg.opts.Interpreter {
		cfg = wazero.NewRuntimeConfigInterpreter().WithCloseOnContextDone(true).WithMemoryLimitPages(man.Limits.MemoryPages).WithCompilationCache(mg.cache)
	}
	v.rt = wazero.NewRuntimeWithConfig(ctx, cfg)
	fail := func(err error) (*version, error) {
		v.close(context.Background())
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, v.rt); err != nil {
		return fail(err)
	}
	if err := instantiateHost(ctx, v.rt); err != nil {
		return fail(err)
	}
	cm, err := compile(ctx, v.rt, wasm, mg.opts.MaxModuleSize, man.Limits.MemoryPages)
	if err != nil {
		return fail(err)
	}
	v.cm = cm
	inst, err := v.instantiate(ctx)
	if err != nil {
		return fail(invalid(checkStart, "the program does not start: %v", err))
	}
	v.idle <- inst
	return v, nil
}

// instantiate starts a new instance: its WASI environment is the
// manifest's env, its standard streams go to the log, and its
// initializer (if it exports one) runs.
func (v *version) instantiate(ctx context.Context) (*instance, error) {
	out := &logBudget{}
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions(exportInit).
		WithArgs(v.name).WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader).
		WithStdout(logWriter{v.log, "stdout", out}).WithStderr(logWriter{v.log, "stderr", out})
	for k, val := range v.man.Env {
		cfg = cfg.WithEnv(k, val)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, startKey{}, starting{v, out}), startTimeout)
	defer cancel()
	mod, err := v.rt.InstantiateModule(ctx, v.cm, cfg)
	if err != nil {
		return nil, err
	}
	return &instance{mod: mod, alloc: mod.ExportedFunction(exportAlloc), handle: mod.ExportedFunction(exportHandle), out: out}, nil
}

// get takes an idle instance or starts one. A delivery holds at most one,
// and at most MaxInFlight deliveries run, so the pool never holds more.
func (v *version) get(ctx context.Context) (*instance, error) {
	select {
	case inst := <-v.idle:
		return inst, nil
	default:
		return v.instantiate(ctx)
	}
}

// put gives a healthy instance back, or closes it when the pool is full.
func (v *version) put(inst *instance) {
	select {
	case v.idle <- inst:
	default:
		_ = inst.mod.Close(context.Background())
	}
}

// deliver runs d through an instance: the message (its JSON envelope) is
// copied into memory pigeon_alloc returns, then pigeon_handle is called
// with the limits of the manifest. An instance that failed in any way is
// closed, never reused.
func (v *version) deliver(ctx context.Context, caller pigeon.Caller, d *pigeon.Delivery) error {
	inst, err := v.get(ctx)
	if err != nil {
		return v.failed(ctx, caller, d, pigeon.WrapError(pigeon.CodeProgramTrapped, err, "program %s: no instance could be started", v.name))
	}
	msg := d.AppendMessageJSON(nil)
	inst.out.lines = 0
	c := &call{v: v, caller: caller, d: d, out: inst.out, hop: v.lin.of(d.Message)}
	cctx, cancel := context.WithTimeout(ctx, v.man.Limits.Timeout())
	defer cancel()
	status, err := inst.call(cctx, c, msg)
	if err == nil && status == 0 {
		inst.shed()
		v.put(inst)
		return nil
	}
	var pe *pigeon.Error
	switch {
	case err == nil: // the handler returned a failure; the instance is sound
		inst.shed()
		v.put(inst)
		pe = pigeon.NewError(pigeon.CodeProgramTrapped, "program %s: the handler failed (status %d)", v.name, status)
	case c.overLimit:
		pe = pigeon.NewError(pigeon.CodeProgramLimit, "program %s: more messages emitted than limits.maxEmits (%d)", v.name, v.man.Limits.MaxEmits)
	case errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		pe = pigeon.NewError(pigeon.CodeProgramTimeout, "program %s: the message took longer than %s", v.name, v.man.Limits.Timeout())
	case stackOverflow(err): // before the memory: a stack overflows whatever the memory's size
		pe = pigeon.WrapError(pigeon.CodeProgramLimit, err, "program %s: call stack exhausted (recursion too deep)", v.name)
	case inst.mod.Memory() != nil && inst.mod.Memory().Size() >= v.man.Limits.MemoryPages*65536:
		pe = pigeon.WrapError(pigeon.CodeProgramLimit, err, "program %s: memory exhausted at limits.memoryPages (%d)", v.name, v.man.Limits.MemoryPages)
	default:
		pe = pigeon.WrapError(pigeon.CodeProgramTrapped, err, "program %s trapped", v.name)
	}
	if err != nil {
		_ = inst.mod.Close(context.Background())
	}
	return v.failed(ctx, caller, d, pe)
}

// keptStack is the most call stack, in bytes, an idle instance's function
// handles keep: wazero's compiler starts a handle's stack at 10 KiB.
const keptStack = 1 << 20

// shed drops the function handles of an instance going back to the pool
// whose call stack grew past keptStack, for fresh ones. wazero grows a
// handle's call stack on the Go heap as a call recurses (doubling it, up
// to its ceiling: StackReserve) and keeps it for the handle's next call;
// an idle instance would hold it, outside limits.memoryPages, for as long
// as it idles. Dropped, it is garbage once the call is over.
func (inst *instance) shed() {
	if stackBytes(inst.alloc) > keptStack {
		inst.alloc = inst.mod.ExportedFunction(exportAlloc)
	}
	if stackBytes(inst.handle) > keptStack {
		inst.handle = inst.mod.ExportedFunction(exportHandle)
	}
}

// stackBytes is the size of the call stack fn keeps, as wazero's engines
// hold it (a "stack" slice in the handle), or MaxInt when it cannot tell
// (another wazero), so the handle is then always replaced.
func stackBytes(fn api.Function) int {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return math.MaxInt
	}
	s := v.Elem().FieldByName("stack")
	if s.Kind() != reflect.Slice {
		return math.MaxInt
	}
	return s.Cap() * int(s.Type().Elem().Size())
}

// stackOverflow reports whether err is wazero's stack overflow (its
// compiler's call stack at its ceiling, or its interpreter's 2,000
// frames): a *wasmruntime.Error, internal to wazero, reading "stack
// overflow", returned as it is or wrapped.
func stackOverflow(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == "stack overflow" && reflect.TypeOf(err).String() == "*wasmruntime.Error" {
			return true
		}
	}
	return false
}

// call copies msg into the instance and runs the handler on it, for c.
// pigeon_alloc runs as an initializer does: it may log, but its publish
// or reply is refused (it is no handler, and what it emitted would be
// counted against no delivery's limits and lineage).
func (inst *instance) call(ctx context.Context, c *call, msg []byte) (uint32, error) {
	res, err := inst.alloc.Call(context.WithValue(ctx, startKey{}, starting{c.v, inst.out}), uint64(len(msg)))
	if err != nil {
		return 0, err
	}
	ptr := uint32(res[0])
	if !inst.mod.Memory().Write(ptr, msg) {
		return 0, errors.New("pigeon_alloc returned memory out of range")
	}
	if res, err = inst.handle.Call(context.WithValue(ctx, callKey{}, c), uint64(ptr), uint64(len(msg))); err != nil {
		return 0, err
	}
	return uint32(res[0]), nil
}

// failed audits and logs a failed delivery and returns its error, which
// nacks it. The record names the message by its id and its sequence
// (Seqs, as the engine's records of one message do): an id is the
// publisher's choice, and names another message once retention freed it.
//
// The delivery waits for the record at most limits.timeoutMs more
// (settle), never longer: a slow durable or clustered store does not
// hold the delivery, its place among route.maxInFlight and its nack for
// as long as the write takes, and the record is written all the same.
// With a store that answers within that time, the record is written
// before the nack, as before.
func (v *version) failed(ctx context.Context, caller pigeon.Caller, d *pigeon.Delivery, pe *pigeon.Error) error {
	v.log.Warn("program delivery failed", "code", pe.Code, "subject", d.Subject, "message", d.Message.ID, "sequence", d.Message.Sequence, "attempt", d.Attempt, "error", pe.Message)
	rec := pigeon.AuditRecord{
		Subject: d.Subject, Principal: caller.Principal.ID, ContractID: caller.ContractID, MessageID: d.Message.ID, Seqs: seqText(d.Message.Sequence), Ref: v.ref(),
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.man.Limits.Timeout())
	defer cancel()
	settle(wctx, v.wg, func(ctx context.Context) {
		_ = v.e.Record(ctx, pigeon.EventProgramFailed, pe.Code, rec)
	})
	return pe
}

// seqText is the Seqs of the audit record of one message: its sequence
// in decimal, as the engine writes it (empty when none is known).
func seqText(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return strconv.FormatUint(seq, 10)
}

// ref names the version in audit records: "program:<name>@<number>".
func (v *version) ref() string { return "program:" + v.name + "@" + strconv.Itoa(v.number) }

// acquire returns with v held for a delivery, or false once v is retired.
func (v *version) acquire() bool {
	v.mu.RLock()
	if v.retired {
		v.mu.RUnlock()
		return false
	}
	return true
}

func (v *version) release() { v.mu.RUnlock() }

// retire waits for the deliveries in flight on v, then closes its runtime
// and every instance. It is idempotent.
func (v *version) retire(ctx context.Context) {
	v.mu.Lock()
	already := v.retired
	v.retired = true
	v.mu.Unlock()
	if !already {
		v.close(context.WithoutCancel(ctx))
	}
}

// close closes v's runtime (and its instances), then its compiled
// module. The Manager's runtimes share a compilation cache, and closing
// a runtime that has one leaves its compiled modules in the cache: each
// one stays (its machine code, of a module up to Options.MaxModuleSize)
// until its CompiledModule is closed, which drops it once no other
// version compiled the same module.
func (v *version) close(ctx context.Context) {
	_ = v.rt.Close(ctx)
	if v.cm != nil {
		_ = v.cm.Close(ctx)
	}
}
