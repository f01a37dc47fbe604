package programs

import (
	"bytes"
	"context"
	"fmt"
	"math"
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
	checkMemory   = "memory"   // its initial memory is above limits.memoryPages, or its tables, types, globals or element section above their bounds
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
	wasm, err := capTables(wasm)
	if err != nil {
		return nil, err
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

// MaxTableEntries bounds the entries of a module's tables, all of them
// together, at their largest. wazero keeps a table's entries (8 bytes
// each) on the Go heap, outside limits.memoryPages: it allocates a
// table's initial size when an instance starts (up to 2²⁷ entries, 1 GiB,
// a table) and table.grow appends to it up to the table's maximum, or 2³²
// entries (32 GiB) when it declares none, which the Go runtime cannot
// allocate and dies of. A Go program's one table holds its functions
// and 4096 more (the enricher's, 6,228 entries); 2¹⁸ entries (2 MiB)
// leave room for programs 40 times its size.
const MaxTableEntries = 1 << 18

// MaxGlobals bounds the globals a module defines. wazero allocates each
// one (≈ 72 bytes) for every instance, on the Go heap, beyond
// limits.memoryPages: 5 bytes of module a global, a 32 MiB module would
// take ≈ 480 MB an instance. A Go program defines 8.
const MaxGlobals = 1 << 14

// MaxTypes bounds the function types a module's type section defines.
// wazero decodes each one (3 bytes of module at least) into a structure
// of ≈ 130 bytes kept with the compiled module, and gives every instance
// an index of them (4 bytes a type), on the Go heap, beyond
// limits.memoryPages: 4 million types (a 12 MiB module) held ≈ 525 MB
// for each version deployed, and took ≈ 1.6 GB while it compiled. A Go
// program defines 14.
const MaxTypes = 1 << 14

// maxImports bounds the imports of a module. The host module and the
// WASI calls allowed are 19 functions, but one may be imported many
// times: wazero keeps each import (≈ 13 bytes of module) decoded with
// the compiled module, ≈ 350 bytes of the Go heap beyond
// limits.memoryPages (a million imports of pigeon.log, a 13 MiB module,
// held ≈ 366 MB for as long as it was deployed). A Go program has 18.
const maxImports = 256

// maxExports bounds the exports of a module. wazero's handling of them
// takes time in the square of their number: 20,000 exported functions
// took 2.3 s to deploy (5,000: 0.27 s), and a million (a 15 MiB module)
// would hold a core, and the program's lock, for hours. The ABI needs
// three or four; a Go or Rust program exports a handful more.
const maxExports = 256

// counted are the sections, by id, whose entries capTables counts against
// a bound, and the check that refuses a module with more.
var counted = map[byte]struct {
	most        uint64
	check, what string
}{
	1: {MaxTypes, checkMemory, "function types"},
	2: {maxImports, checkImport, "imports"},
	6: {MaxGlobals, checkMemory, "globals"},
	7: {maxExports, checkExport, "exports"},
}

// maxElementBytes bounds a module's element section: wazero keeps each
// entry of a passive segment (8 bytes) for every instance, and decodes
// each entry into a constant expression (≈ 40 bytes) when it compiles, a
// byte of module an entry at least. An active segment only fills a table
// (MaxTableEntries, each at most a 5-byte index), which this leaves room
// for.
const maxElementBytes = 5 * MaxTableEntries

// capTables returns wasm with the maximum of each table that declares
// none set to its initial size, so that table.grow fails (-1) rather
// than grow it; wasm itself is not changed. It refuses (check "memory")
// a module whose tables may hold more than MaxTableEntries together, that
// defines more than MaxTypes function types or MaxGlobals globals, or
// whose element section is larger than maxElementBytes (what its
// instances would hold on the Go heap, beyond limits.memoryPages), one
// with more than maxImports imports (check "import") or maxExports
// exports (check "export"): the sections counted; and (check "compile")
// one whose sections or tables it cannot read, or that
// declares a table of a form other than funcref or externref with plain
// limits (the typed references of the function-references proposal).
func capTables(wasm []byte) ([]byte, error) {
	malformed := func(what string) ([]byte, error) {
		return nil, invalid(checkCompile, "the module does not compile: %s", what)
	}
	out := wasm
	var total uint64
	for b, at := wasm[len(wasmMagic):], len(wasmMagic); len(b) > 0; {
		id := b[0]
		size, n := leb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return malformed("a section's size is malformed")
		}
		body := b[1+n : 1+n+int(size)]
		next := at + 1 + n + int(size)
		b = b[1+n+int(size):]
		if c, ok := counted[id]; ok {
			if count, n := leb(body); n > 0 && count > c.most {
				return nil, invalid(c.check, "the module has %d %s; at most %d are accepted", count, c.what, c.most)
			}
		}
		switch id {
		case 9:
			if len(body) > maxElementBytes {
				return nil, invalid(checkMemory, "the module's element section is %d bytes; at most %d are accepted", len(body), maxElementBytes)
			}
		}
		if id != 4 {
			at = next
			continue
		}
		capped, sum, ok := capTableSection(body)
		if !ok {
			return malformed("its table section is malformed, or declares a table of a form programs do not support")
		}
		if total += sum; total > MaxTableEntries {
			return nil, invalid(checkMemory, "the module's tables may hold %d entries; at most %d are accepted", total, MaxTableEntries)
		}
		if capped != nil {
			rebuilt := append(out[:at:at], id) // a copy: wasm is the caller's
			rebuilt = appendLEB(rebuilt, uint64(len(capped)))
			rebuilt = append(rebuilt, capped...)
			shift := len(rebuilt) - next
			out = append(rebuilt, out[next:]...)
			next += shift
		}
		at = next
	}
	return out, nil
}

// capTableSection reads a table section's body: the most entries its
// tables may hold (each one's maximum, or its initial size when it
// declares none) and, when a table declares no maximum, the body with
// that maximum set to its initial size (nil when none needs it). ok is
// false when the body is malformed or a table is not a funcref (0x70) or
// externref (0x6f) table with limits flagged 0x00 or 0x01.
func capTableSection(body []byte) (capped []byte, sum uint64, ok bool) {
	count, n := leb(body)
	if n == 0 {
		return nil, 0, false
	}
	out := slices.Clone(body[:n])
	rest := body[n:]
	changed := false
	for range count {
		if len(rest) < 2 || (rest[0] != 0x70 && rest[0] != 0x6f) {
			return nil, 0, false
		}
		typ, flag := rest[0], rest[1]
		min, n1 := leb(rest[2:])
		if n1 == 0 || min > math.MaxUint32 {
			return nil, 0, false
		}
		minBytes := rest[2 : 2+n1]
		max, maxBytes := min, minBytes
		switch flag {
		case 0x00:
			changed = true
			rest = rest[2+n1:]
		case 0x01:
			var n2 int
			if max, n2 = leb(rest[2+n1:]); n2 == 0 || max > math.MaxUint32 {
				return nil, 0, false
			}
			maxBytes = rest[2+n1 : 2+n1+n2]
			rest = rest[2+n1+n2:]
		default:
			return nil, 0, false
		}
		sum += max
		out = append(append(append(out, typ, 0x01), minBytes...), maxBytes...)
	}
	if !changed {
		return nil, sum, true
	}
	return append(out, rest...), sum, true // trailing bytes, if any, for the compiler to refuse
}

// appendLEB appends v as an unsigned LEB128.
func appendLEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		if v >>= 7; v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
