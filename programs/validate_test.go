package programs_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

func TestDeployRefusesInvalidModules(t *testing.T) {
	f := newFixture(t, nil)
	withImport := func(module, name string, params, results []byte) []byte {
		m := abiModule(handleOK, 1)
		m.imports = []wimport{{module: module, name: name, params: params, results: results}}
		return m.encode()
	}
	noHandle := abiModule(handleOK, 1)
	noHandle.funcs = noHandle.funcs[:1]
	noMemory := abiModule(handleOK, 1)
	noMemory.noMem = true
	wrongType := abiModule(handleOK, 1)
	wrongType.funcs[1].params = []byte{tI32}
	small := func(m *programs.Manifest) { m.Limits.MemoryPages = 10 }
	for _, tc := range []struct {
		name   string
		module []byte
		man    programs.Manifest
		check  string
	}{
		{"bad magic", []byte("this is not a wasm module"), manifest(), "magic"},
		{"truncated", modOK[:len(modOK)-3], manifest(), "compile"},
		{"forbidden WASI call", withImport("wasi_snapshot_preview1", "path_open", []byte{tI32}, []byte{tI32}), manifest(), "import"},
		{"sockets", withImport("wasi_snapshot_preview1", "sock_accept", []byte{tI32}, []byte{tI32}), manifest(), "import"},
		{"foreign module", withImport("env", "system", nil, nil), manifest(), "import"},
		{"unknown host function", withImport("pigeon", "exec", nil, nil), manifest(), "import"},
		{"host function of the wrong type", withImport("pigeon", "publish", nil, nil), manifest(), "import"},
		{"missing export", noHandle.encode(), manifest(), "export"},
		{"entry point of the wrong type", wrongType.encode(), manifest(), "export"},
		{"memory not exported", noMemory.encode(), manifest(), "export"},
		{"memory over the cap", abiModule(handleOK, 100).encode(), manifest(small), "memory"},
		{"route refused by the contract", modOK, manifest(func(m *programs.Manifest) { m.Route.Subject = "orders.out" }), "bind"},
		{"unknown account", modOK, manifest(func(m *programs.Manifest) { m.Account = "nobody" }), "bind"},
		{"manifest out of range", modOK, manifest(func(m *programs.Manifest) { m.Limits.MaxEmits = -1 }), "manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.mg.Deploy(context.Background(), admin, "bad", tc.man, tc.module)
			require.Error(t, err)
			var pe *pigeon.Error
			require.True(t, errors.As(err, &pe), "%v", err)
			require.Equal(t, pigeon.CodeProgramInvalid, pe.Code, "%v", err)
			require.Equal(t, tc.check, pe.Details["check"], "%v", err)
			require.ErrorIs(t, err, pigeon.ErrInvalid)
			_, err = f.mg.Get(context.Background(), "bad")
			require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "nothing is bound")
		})
	}
	require.Len(t, f.audited(t, pigeon.EventProgramRefused), 14, "every refusal is audited")
	require.Empty(t, f.mg.List(context.Background()))
}

// A failed deploy of a new version leaves the old one running.
func TestFailedDeployKeepsTheOldVersion(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	_, err = f.mg.Deploy(ctx, admin, "p", manifest(), []byte("garbage"))
	require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err))
	in, err := f.mg.Get(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, 1, in.Version)
	require.True(t, in.Bound)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.audited(t, pigeon.EventDeliveryAcked)) == 1 }, "the old version still handles deliveries")
}
