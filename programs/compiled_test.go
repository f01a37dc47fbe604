package programs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"pigeon"
	"pigeon/programs"
)

// A version's compiled code lives in the Manager's compilation cache
// (always one: its own when Options.Cache is nil), where closing the
// version's runtime does not drop it: every version swapped out, rolled
// back from or removed, and every deploy refused after it compiled (its
// initializer trapped, its route could not be bound), left its compiled
// code (several times a module of up to 32 MiB) on the heap for as long
// as the process ran. A principal allowed to deploy could grow it without
// end, each deploy a module of new bytes.
func TestRetiredVersionsDropTheirCompiledCode(t *testing.T) {
	for _, interp := range []bool{false, true} {
		t.Run(map[bool]string{false: "compiler", true: "interpreter"}[interp], func(t *testing.T) {
			f := newFixture(t, nil)
			ctx := context.Background()
			c := wazero.NewCompilationCache()
			t.Cleanup(func() { _ = c.Close(context.Background()) })
			mg, err := programs.New(ctx, f.e, &programs.Options{KV: f.st, Cache: c, Interpreter: interp})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
			if programs.CompiledModules(c) < 0 {
				t.Skip("this wazero's cache cannot be read")
			}

			_, err = mg.Deploy(ctx, admin, "p", manifest(), abiModule(handleOK, 1).encode())
			require.NoError(t, err)
			running := programs.CompiledModules(c) // the program's and the host modules
			require.Positive(t, running)

			for pages := uint32(2); pages < 6; pages++ { // modules of new bytes
				_, err = mg.Deploy(ctx, admin, "p", manifest(), abiModule(handleOK, pages).encode())
				require.NoError(t, err)
			}
			_, err = mg.Deploy(ctx, admin, "p", manifest(func(m *programs.Manifest) { m.Route.MaxInFlight = 2 }), abiModule(handleOK, 6).encode())
			require.NoError(t, err, "a new binding")
			_, err = mg.Rollback(ctx, admin, "p", 0)
			require.NoError(t, err)
			require.Equal(t, running, programs.CompiledModules(c), "only the running version's code is kept")

			trapInit := abiModule(handleOK, 7)
			trapInit.funcs = append(trapInit.funcs, wfunc{code: []byte{opUnreachable}, export: "_initialize"})
			_, err = mg.Deploy(ctx, admin, "p", manifest(), trapInit.encode())
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err))
			_, err = mg.Deploy(ctx, admin, "p", manifest(func(m *programs.Manifest) { m.Account = "nobody" }), abiModule(handleOK, 8).encode())
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "not bound")
			require.Equal(t, running, programs.CompiledModules(c), "a refused deploy keeps no code")

			require.NoError(t, mg.Remove(ctx, admin, "p"))
			require.Zero(t, programs.CompiledModules(c), "a removed program keeps no code (nor do the host modules of its runtime)")
		})
	}
}
