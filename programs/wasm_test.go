package programs_test

// A tiny WebAssembly binary encoder for the hand-written test modules
// (no external assembler is needed): enough for functions, imports, one
// exported memory and exports.

// Value types and opcodes used by the test modules.
const (
	tI32 = 0x7f

	opUnreachable = 0x00
	opBlock       = 0x02
	opLoop        = 0x03
	opEnd         = 0x0b
	opBr          = 0x0c
	opBrIf        = 0x0d
	opIf          = 0x04
	opElse        = 0x05
	opI32Eqz      = 0x45
	opI32Sub      = 0x6b
	opCall        = 0x10
	opLocalGet    = 0x20
	opI32Const    = 0x41
	opI32Eq       = 0x46
	opMemoryGrow  = 0x40
	blockEmpty    = 0x40
)

type wfunc struct {
	params, results []byte
	code            []byte // the instructions, without the final end
	export          string
}

type wimport struct {
	module, name    string
	params, results []byte
}

type wmodule struct {
	imports []wimport
	funcs   []wfunc
	memMin  uint32
	noMem   bool // export no memory
	// tables are funcref tables: each an initial size and, when max is
	// not nil, a maximum.
	tables []wtable
	// globals is how many immutable i32 globals (of 0) it defines.
	globals int
	// elem is the body of its element section, when not nil.
	elem []byte
	// data are active data segments: bytes written at an offset of the
	// memory when an instance starts.
	data []wdata
}

type wtable struct {
	min uint32
	max *uint32
}

type wdata struct {
	offset int64
	bytes  []byte
}

func uleb(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func sleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func name(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }

func vec(b []byte, items ...[]byte) []byte {
	b = uleb(b, uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func section(b []byte, id byte, body []byte) []byte {
	return append(uleb(append(b, id), uint64(len(body))), body...)
}

// i32c is the instruction i32.const v.
func i32c(v int64) []byte { return sleb([]byte{opI32Const}, v) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (m wmodule) encode() []byte {
	var types [][]byte
	typeOf := func(params, results []byte) uint64 {
		t := append(vec([]byte{0x60}, bytesOf(params)...), vec(nil, bytesOf(results)...)...)
		for i, x := range types {
			if string(x) == string(t) {
				return uint64(i)
			}
		}
		types = append(types, t)
		return uint64(len(types) - 1)
	}
	var imps, fidx, exps, codes [][]byte
	for _, im := range m.imports {
		imps = append(imps, uleb(append(name(name(nil, im.module), im.name), 0x00), typeOf(im.params, im.results)))
	}
	for i, f := range m.funcs {
		fidx = append(fidx, uleb(nil, typeOf(f.params, f.results)))
		body := append(append([]byte{0x00}, f.code...), opEnd) // no locals
		codes = append(codes, append(uleb(nil, uint64(len(body))), body...))
		if f.export != "" {
			exps = append(exps, uleb(append(name(nil, f.export), 0x00), uint64(len(m.imports)+i)))
		}
	}
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	out = section(out, 1, vec(nil, types...))
	out = section(out, 2, vec(nil, imps...))
	out = section(out, 3, vec(nil, fidx...))
	if len(m.tables) > 0 {
		var tabs [][]byte
		for _, t := range m.tables {
			if t.max == nil {
				tabs = append(tabs, uleb([]byte{0x70, 0x00}, uint64(t.min)))
			} else {
				tabs = append(tabs, uleb(uleb([]byte{0x70, 0x01}, uint64(t.min)), uint64(*t.max)))
			}
		}
		out = section(out, 4, vec(nil, tabs...))
	}
	out = section(out, 5, vec(nil, uleb([]byte{0x00}, uint64(m.memMin))))
	if m.globals > 0 {
		globals := uleb(nil, uint64(m.globals))
		for range m.globals {
			globals = append(globals, tI32, 0x00, opI32Const, 0x00, opEnd)
		}
		out = section(out, 6, globals)
	}
	if !m.noMem {
		exps = append(exps, append(name(nil, "memory"), 0x02, 0x00))
	}
	out = section(out, 7, vec(nil, exps...))
	if m.elem != nil {
		out = section(out, 9, m.elem)
	}
	out = section(out, 10, vec(nil, codes...))
	if len(m.data) == 0 {
		return out
	}
	var segs [][]byte
	for _, d := range m.data {
		segs = append(segs, append(uleb(append(append([]byte{0x00}, i32c(d.offset)...), opEnd), uint64(len(d.bytes))), d.bytes...))
	}
	return section(out, 11, vec(nil, segs...))
}

func bytesOf(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}

// abiModule is a module with the ABI's entry points: pigeon_alloc returns
// a fixed buffer and pigeon_handle runs handle (which leaves an i32).
func abiModule(handle []byte, memMin uint32) wmodule {
	return wmodule{memMin: memMin, funcs: []wfunc{
		{params: []byte{tI32}, results: []byte{tI32}, code: i32c(1024), export: "pigeon_alloc"},
		{params: []byte{tI32, tI32}, results: []byte{tI32}, code: handle, export: "pigeon_handle"},
	}}
}

// Handlers of the hand-written modules.
var (
	handleOK   = i32c(0)
	handleFail = i32c(1)
	handleTrap = []byte{opUnreachable}
	// handleLoop loops forever.
	handleLoop = cat([]byte{opLoop, blockEmpty, opBr, 0, opEnd}, i32c(0))
	// handleGrow grows memory a page at a time until it cannot, then traps.
	handleGrow = cat([]byte{opBlock, blockEmpty, opLoop, blockEmpty}, i32c(1), []byte{opMemoryGrow, 0}, i32c(-1),
		[]byte{opI32Eq, opBrIf, 1, opBr, 0, opEnd, opEnd, opUnreachable})
)

// modLog logs the message it handles (pigeon.log at level 0) and
// acknowledges it.
var modLog = func() []byte {
	m := abiModule(cat(i32c(0), []byte{opLocalGet, 0, opLocalGet, 1, opCall, 0}, i32c(0)), 1)
	m.imports = []wimport{{module: "pigeon", name: "log", params: []byte{tI32, tI32, tI32}}}
	return m.encode()
}()

// Modules of the tests.
var (
	modOK   = abiModule(handleOK, 1).encode()
	modTrap = abiModule(handleTrap, 1).encode()
	modLoop = abiModule(handleLoop, 1).encode()
	modGrow = abiModule(handleGrow, 1).encode()
	modFail = abiModule(handleFail, 1).encode()
)

// recursiveModule is a module whose pigeon_handle calls rec(depth), a
// function that calls itself depth times (it is not a tail call: its
// result is its callee's), then returns 0. A depth of -1 (2³² - 1 as
// unsigned, far past any call stack) overflows the stack.
func recursiveModule(depth int64, memMin uint32) []byte {
	m := abiModule(cat(i32c(depth), []byte{opCall, 2, opDrop}, i32c(0)), memMin)
	m.funcs = append(m.funcs, wfunc{params: []byte{tI32}, results: []byte{tI32}, code: cat(
		[]byte{opLocalGet, 0, opI32Eqz, opIf, tI32}, i32c(0),
		[]byte{opElse, opLocalGet, 0}, i32c(1), []byte{opI32Sub, opCall, 2, opEnd})})
	return m.encode()
}
