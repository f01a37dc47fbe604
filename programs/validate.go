package programs

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"pigeon"
)

// Checks a deploy can fail, named in the PROGRAM_INVALID error's Details
// ("check") and in its program.refused audit record.
const (
	checkManifest = "manifest" // the manifest does not parse or a field is out of range
	checkMagic    = "magic"    // not a WebAssembly binary module (version 1)
	checkSize     = "size"     // the module is larger than Options.MaxModuleSize
	checkCompile  = "compile"  // the module does not compile
	checkImport   = "import"   // it imports something outside the host module and the allowed WASI calls
	checkExport   = "export"   // an entry point of the ABI (or its memory) is missing or of the wrong type
	checkMemory   = "memory"   // its initial memory is above limits.memoryPages
	checkStart    = "start"    // an instance could not be started (its initializer trapped)
	checkBind     = "bind"     // the route could not be bound (account, contract, subject, selector)
)

// invalid is a PROGRAM_INVALID refusal of check.
func invalid(check, format string, args ...any) *pigeon.Error {
	e := pigeon.NewError(pigeon.CodeProgramInvalid, format, args...)
	e.Details = map[string]any{"check": check}
	return e
}

// Module names a program may import from.
const (
	hostModule = "pigeon"
	wasiModule = "wasi_snapshot_preview1"
)

// Entry points of the ABI.
const (
	exportMemory = "memory"
	exportAlloc  = "pigeon_alloc"
	exportHandle = "pigeon_handle"
	exportInit   = "_initialize"
)

// allowedWASI are the WASI calls a program may import: what a Go or Rust
// program needs to start and write to its standard streams. No file
// system and no socket is ever configured, so the descriptor calls see
// only stdin (empty), stdout and stderr.
var allowedWASI = []string{
	"args_get", "args_sizes_get", "environ_get", "environ_sizes_get",
	"clock_time_get", "clock_res_get", "random_get", "sched_yield", "poll_oneoff", "proc_exit",
	"fd_write", "fd_close", "fd_fdstat_get", "fd_fdstat_set_flags", "fd_prestat_get", "fd_prestat_dir_name",
}

// signature is a function type of the ABI.
type signature struct{ params, results []api.ValueType }

func (s signature) matches(f api.FunctionDefinition) bool {
	return slices.Equal(s.params, f.ParamTypes()) && slices.Equal(s.results, f.ResultTypes())
}

func (s signature) String() string {
	return fmt.Sprintf("%v -> %v", typeNames(s.params), typeNames(s.results))
}

func typeNames(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}

var (
	i32      = api.ValueTypeI32
	sigAlloc = signature{[]api.ValueType{i32}, []api.ValueType{i32}}
	sigEmit  = signature{[]api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}}
	sigLog   = signature{[]api.ValueType{i32, i32, i32}, nil}
	// hostFuncs are the host module's functions and their types.
	hostFuncs = map[string]signature{"publish": sigEmit, "reply": sigEmit, "log": sigLog}
	// exports are the entry points a program must export.
	exports = map[string]signature{exportAlloc: sigAlloc, exportHandle: {[]api.ValueType{i32, i32}, []api.ValueType{i32}}}
)

var wasmMagic = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

// compile checks the module's header and size, compiles it on rt and
// checks its imports, exports and memory against the ABI and pages.
func compile(ctx context.Context, rt wazero.Runtime, wasm []byte, maxSize int, pages uint32) (wazero.CompiledModule, error) {
	if !bytes.HasPrefix(wasm, wasmMagic) {
		return nil, invalid(checkMagic, "not a WebAssembly binary module (version 1)")
	}
	if len(wasm) > maxSize {
		return nil, invalid(checkSize, "the module is %d bytes; at most %d are accepted", len(wasm), maxSize)
	}
	if min, ok := memoryMin(wasm); ok && min > uint64(pages) {
		return nil, invalid(checkMemory, "the module's initial memory is %d pages; limits.memoryPages is %d", min, pages)
	}
	cm, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, invalid(checkCompile, "the module does not compile: %v", err)
	}
	if err := checkModule(cm); err != nil {
		_ = cm.Close(ctx)
		return nil, err
	}
	return cm, nil
}

func checkModule(cm wazero.CompiledModule) error {
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case hostModule:
			sig, ok := hostFuncs[name]
			if !ok {
				return invalid(checkImport, "the host module has no function %q", name)
			}
			if !sig.matches(f) {
				return invalid(checkImport, "%s.%s must be %s", mod, name, sig)
			}
		case wasiModule:
			if !slices.Contains(allowedWASI, name) {
				return invalid(checkImport, "the WASI call %s is not allowed (no files, no sockets)", name)
			}
		default:
			return invalid(checkImport, "import %s.%s is not allowed: only %q and the minimal WASI calls are", mod, name, hostModule)
		}
	}
	if len(cm.ImportedMemories()) > 0 {
		return invalid(checkImport, "a program must not import memory")
	}
	fns := cm.ExportedFunctions()
	for name, sig := range exports {
		f, ok := fns[name]
		if !ok {
			return invalid(checkExport, "the entry point %s is not exported", name)
		}
		if !sig.matches(f) {
			return invalid(checkExport, "the entry point %s must be %s", name, sig)
		}
	}
	if f, ok := fns[exportInit]; ok && (len(f.ParamTypes()) > 0 || len(f.ResultTypes()) > 0) {
		return invalid(checkExport, "%s must take and return nothing", exportInit)
	}
	if _, ok := cm.ExportedMemories()[exportMemory]; !ok {
		return invalid(checkExport, "the module must export its memory as %q", exportMemory)
	}
	return nil
}

// memoryMin reads the initial size of the first memory the module's
// memory section defines, so that one over the cap is named as such
// (the compiler refuses it too, with a message of its own). ok is false
// when there is none or the binary is malformed (compiling then says so).
func memoryMin(wasm []byte) (initial uint64, ok bool) {
	b := wasm[len(wasmMagic):]
	for len(b) > 0 {
		id := b[0]
		size, n := leb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return 0, false
		}
		body := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 5 {
			continue
		}
		count, n := leb(body)
		if n == 0 || count == 0 || len(body) < n+2 {
			return 0, false
		}
		initial, n2 := leb(body[n+1:]) // after the limits flag
		return initial, n2 > 0
	}
	return 0, false
}

// leb decodes an unsigned LEB128 of at most 5 bytes; n is 0 when malformed.
func leb(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 5; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
