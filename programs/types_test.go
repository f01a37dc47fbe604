package programs_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// withTypes is modOK with n more function types (each "() -> ()", 3
// bytes) in its type section.
func withTypes(n int) []byte {
	mod := abiModule(handleOK, 1).encode()
	body := uleb(nil, uint64(n+2))
	body = append(body, 0x60, 1, tI32, 1, tI32, 0x60, 2, tI32, tI32, 1, tI32) // the ABI's: alloc, handle
	for range n {
		body = append(body, 0x60, 0, 0)
	}
	rest := mod[8:] // the sections; the type section first
	size, n1 := uint64(0), 0
	for i := 1; n1 == 0; i++ {
		size |= uint64(rest[i]&0x7f) << (7 * (i - 1))
		if rest[i]&0x80 == 0 {
			n1 = i
		}
	}
	out := section(append([]byte{}, mod[:8]...), 1, body)
	return append(out, rest[1+n1+int(size):]...)
}

// A module's type section was not bounded: wazero decodes each function
// type (3 bytes of module) into ≈ 130 bytes kept with the compiled module,
// and gives each instance an index of them, all on the Go heap beyond
// limits.memoryPages: a 12 MiB module of 4 million types held ≈ 525 MB
// for as long as it was deployed (1.6 GB while it compiled), 32 programs
// of an account many times the machine.
func TestProgramTypesAreBounded(t *testing.T) {
	requireCountBounded(t, func(total int) []byte { return withTypes(total - 2) }, programs.MaxTypes, "memory")
}

// A module could import the functions it is allowed many times over
// (only their names were checked): wazero keeps each import decoded with
// the compiled module, a million imports of pigeon.log (13 MiB of
// module) ≈ 366 MB of the Go heap for as long as it was deployed.
func TestProgramImportsAreBounded(t *testing.T) {
	requireCountBounded(t, func(total int) []byte {
		m := abiModule(handleOK, 1)
		for range total {
			m.imports = append(m.imports, wimport{module: "pigeon", name: "log", params: []byte{tI32, tI32, tI32}})
		}
		return m.encode()
	}, 256, "import")
}

// A module's exports were not counted, and wazero's handling of them
// takes time in the square of their number: 20,000 exported functions
// took 2.3 s to deploy (5,000: 0.27 s), a million would hold a core and
// the program's lock for hours. At most 256 exports are accepted.
func TestProgramExportsAreBounded(t *testing.T) {
	requireCountBounded(t, func(total int) []byte {
		m := abiModule(handleOK, 1) // exports pigeon_alloc, pigeon_handle and memory
		for i := range total - 3 {
			m.funcs = append(m.funcs, wfunc{code: []byte{}, export: "f" + strconv.Itoa(i)})
		}
		return m.encode()
	}, 256, "export")
}

// requireCountBounded deploys build(most), which has most entries of what
// is counted, and requires build(most+1) refused PROGRAM_INVALID by check.
func requireCountBounded(t *testing.T, build func(total int) []byte, most int, check string) {
	t.Helper()
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "counted", manifest(), build(most))
	require.NoError(t, err, "at the bound")

	_, err = f.mg.Deploy(ctx, admin, "counted", manifest(), build(most+1))
	require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "%v", err)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, check, pe.Details["check"], "%v", err)
}
