package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// programContracts counts the live contracts of the programs' account.
func (f *fixture) programContracts(t *testing.T) int {
	t.Helper()
	live, _, err := f.e.LiveContracts(context.Background(), 0)
	require.NoError(t, err)
	n := 0
	for _, k := range live {
		if k.Principal == progAcc {
			n++
		}
	}
	return n
}

// Close stopped the programs' bindings but left their contracts live:
// usable, and counted among the account's contracts, until they expired
// (New negotiates fresh ones). Close revokes them.
func TestCloseRevokesTheProgramsContracts(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "a", manifest(group("a")), modOK)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "b", manifest(group("b")), modOK)
	require.NoError(t, err)
	require.Equal(t, 2, f.programContracts(t))
	require.NoError(t, f.mg.Close(ctx))
	require.Zero(t, f.programContracts(t), "no contract outlives the Manager")
}

// pigeon_alloc ran with the delivery's host context: a program could
// publish from its allocator, which the ABI calls to copy the message in
// and which is no handler. Its publish is refused INVALID_ARGUMENT, as
// an initializer's is; it may still log.
func TestAllocCannotPublish(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	msg := `{"type":"order","subject":"orders.out","intent":"record","classification":"internal","data":{}}`
	const at, errBuf = 16, 512
	publish := cat(i32c(at), i32c(int64(len(msg))), i32c(errBuf), i32c(64), []byte{opCall, 0, opDrop})
	m := wmodule{memMin: 1, funcs: []wfunc{
		{params: []byte{tI32}, results: []byte{tI32}, code: cat(publish, i32c(1024)), export: "pigeon_alloc"},
		{params: []byte{tI32, tI32}, results: []byte{tI32}, code: handleOK, export: "pigeon_handle"},
	}}
	m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	m.data = []wdata{{offset: at, bytes: []byte(msg)}}
	_, err := f.mg.Deploy(ctx, admin, "alloc", manifest(), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the delivery is handled")
	_, last, err := f.e.Bounds(ctx, "orders.out")
	require.NoError(t, err)
	require.Zero(t, last, "nothing was published from pigeon_alloc")
}
