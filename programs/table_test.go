package programs_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// tableGrow is table.grow on table 0 (its operands: a reference and a
// count); refNullFunc pushes a null funcref.
var (
	tableGrow   = []byte{0xfc, 0x0f, 0x00}
	refNullFunc = []byte{0xd0, 0x70}
)

func u32(v uint32) *uint32 { return &v }

// A module's tables live on the broker's heap, beyond limits.memoryPages:
// wazero allocates a table's initial size when an instance starts (up to
// 2²⁷ entries of 8 bytes, 1 GiB, a table, and many tables) and grows it
// up to its maximum, or 2³² entries (32 GiB) without one. A deploy whose
// tables may hold more than MaxTableEntries together is refused before
// any instance starts.
func TestProgramTablesAreBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	withTables := func(ts ...wtable) []byte {
		m := abiModule(handleOK, 1)
		m.tables = ts
		return m.encode()
	}
	const most = programs.MaxTableEntries
	for _, tc := range []struct {
		name   string
		module []byte
	}{
		{"initial size over the bound", withTables(wtable{min: most + 1})},
		{"maximum over the bound", withTables(wtable{min: 1, max: u32(math.MaxUint32)})},
		{"tables over the bound together", withTables(wtable{min: 1, max: u32(most / 2)}, wtable{min: most/2 + 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.mg.Deploy(ctx, admin, "tables", manifest(), tc.module)
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "%v", err)
			var pe *pigeon.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "memory", pe.Details["check"], "%v", err)
		})
	}
	// At the bound, a table is taken.
	_, err := f.mg.Deploy(ctx, admin, "tables", manifest(), withTables(wtable{min: 1, max: u32(most / 2)}, wtable{min: most / 2}))
	require.NoError(t, err)
}

// A table that declares no maximum cannot grow: table.grow fails (-1)
// rather than append up to 2³² entries (32 GiB) to the broker's heap. A
// table with a maximum (within the bound) grows up to it.
func TestProgramTableGrowthIsCapped(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	const by = 1 << 16
	// grows acknowledges when table.grow by `by` entries failed (grew:
	// false) or succeeded (grew: true), and fails the delivery otherwise.
	grows := func(grew bool, tab wtable) []byte {
		check := []byte{opI32Eq, opI32Eqz} // status 0 when the result is -1
		if grew {
			check = []byte{opI32Eq} // status 0 when it is not
		}
		m := abiModule(cat(refNullFunc, i32c(by), tableGrow, i32c(-1), check), 1)
		m.tables = []wtable{tab}
		return m.encode()
	}
	_, err := f.mg.Deploy(ctx, admin, "unbounded", manifest(group("unbounded")), grows(false, wtable{min: 1}))
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "bounded", manifest(group("bounded")), grows(true, wtable{min: 1, max: u32(by + 1)}))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 2 }, "both deliveries are acknowledged")
	require.Empty(t, f.quarantined(t, pigeon.CodeDeliveryExhausted))
}

// What wazero allocates for each instance beyond a module's tables is
// bounded too: its globals (≈ 72 bytes each, 5 bytes of module) and the
// entries of its passive element segments (8 bytes each, a byte of
// module, and ≈ 40 decoded when it compiles); a 32 MiB module would
// otherwise take hundreds of MB an instance, beyond limits.memoryPages,
// route.maxInFlight times.
func TestProgramGlobalsAndElementsAreBounded(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	withGlobals := func(n int) []byte {
		m := abiModule(handleOK, 1)
		m.globals = n
		return m.encode()
	}
	// passive is an element section of one passive funcref segment of n
	// entries (function 0).
	passive := func(n int) []byte {
		m := abiModule(handleOK, 1)
		m.elem = append(uleb([]byte{1, 0x01, 0x00}, uint64(n)), make([]byte, n)...)
		return m.encode()
	}
	for _, tc := range []struct {
		name   string
		module []byte
	}{
		{"globals", withGlobals(programs.MaxGlobals + 1)},
		{"element section", passive(programs.MaxElementBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.mg.Deploy(ctx, admin, "big", manifest(), tc.module)
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "%v", err)
			var pe *pigeon.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "memory", pe.Details["check"], "%v", err)
		})
	}
	_, err := f.mg.Deploy(ctx, admin, "globals", manifest(group("globals")), withGlobals(programs.MaxGlobals))
	require.NoError(t, err, "at the bound")
	_, err = f.mg.Deploy(ctx, admin, "elements", manifest(group("elements")), passive(16))
	require.NoError(t, err)
}
