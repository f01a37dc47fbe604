package programs_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

func TestParseManifest(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"minimal", `{"route":{"subject":"a"},"account":"x"}`, true},
		{"full", `{"route":{"subject":"a","selector":"/k=v","filter":"true","group":"g","maxInFlight":4},"account":"x","publishes":["b"],"limits":{"memoryPages":32,"timeoutMs":200,"maxEmits":3},"env":{"K":"v"}}`, true},
		{"no subject", `{"route":{},"account":"x"}`, false},
		{"no account", `{"route":{"subject":"a"}}`, false},
		{"unknown field", `{"route":{"subject":"a"},"account":"x","exec":true}`, false},
		{"trailing data", `{"route":{"subject":"a"},"account":"x"} {}`, false},
		{"memory over the bound", `{"route":{"subject":"a"},"account":"x","limits":{"memoryPages":99999}}`, false},
		{"negative timeout", `{"route":{"subject":"a"},"account":"x","limits":{"timeoutMs":-1}}`, false},
		{"timeout over the bound", `{"route":{"subject":"a"},"account":"x","limits":{"timeoutMs":600000}}`, false},
		// timeoutMs × 1 ms overflows: a negative duration (every message
		// times out at once) or, at 2^58 + 1000, exactly one second.
		{"timeout that overflows to negative", `{"route":{"subject":"a"},"account":"x","limits":{"timeoutMs":9223372036855}}`, false},
		{"timeout that overflows to 1 s", `{"route":{"subject":"a"},"account":"x","limits":{"timeoutMs":288230376151712744}}`, false},
		{"in flight over the bound", `{"route":{"subject":"a","maxInFlight":100000},"account":"x"}`, false},
		{"env name with =", `{"route":{"subject":"a"},"account":"x","env":{"A=B":"c"}}`, false},
		{"empty publish subject", `{"route":{"subject":"a"},"account":"x","publishes":[""]}`, false},
		{"not json", `route: a`, false},
		{"account named twice", `{"route":{"subject":"a"},"account":"x","account":"admin"}`, false},
		{"account in another case", `{"route":{"subject":"a"},"account":"x","Account":"admin"}`, false},
		{"subject in another case", `{"route":{"subject":"a","Subject":"b"},"account":"x"}`, false},
		{"env value not UTF-8", "{\"route\":{\"subject\":\"a\"},\"account\":\"x\",\"env\":{\"K\":\"\xff\"}}", false},
		{"white space around", " \n" + `{"route":{"subject":"a"},"account":"x"}` + "\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := programs.ParseManifest([]byte(tc.in))
			if !tc.ok {
				require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "%v", err)
				return
			}
			require.NoError(t, err)
			require.Positive(t, m.Route.MaxInFlight)
			require.Positive(t, m.Limits.MemoryPages)
			require.Positive(t, m.Limits.TimeoutMs)
			require.Positive(t, m.Limits.MaxEmits)
		})
	}
}

func TestValidName(t *testing.T) {
	require.True(t, programs.ValidName("enricher-2.v1_x"))
	for _, n := range []string{"", "-a", "A", "a/b", "a b", string(make([]byte, 64))} {
		require.False(t, programs.ValidName(n), "%q", n)
	}
}

// FuzzParseManifest: the parser never panics, refuses with
// PROGRAM_INVALID only, and what it accepts encodes back to a manifest
// it accepts unchanged.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"route":{"subject":"a","selector":"/k=v","maxInFlight":2},"account":"x","publishes":["b"],"limits":{"memoryPages":32},"env":{"K":"v"}}`))
	f.Add([]byte(`{"route":{"subject":"a"},"account":"x"}`))
	f.Add([]byte(`{"route":{"subject":"a"},"account":"x","env":{},"publishes":[]}`))
	f.Add([]byte(`{"route":{"subject":"a"},"account":"x","limits":{"timeoutMs":-5}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := programs.ParseManifest(b)
		if err != nil {
			require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err))
			return
		}
		out, err := json.Marshal(m)
		require.NoError(t, err)
		again, err := programs.ParseManifest(out)
		require.NoError(t, err, "%s", out)
		require.Equal(t, m, again)
	})
}

func TestProgramCodesGroup(t *testing.T) {
	for code, group := range map[pigeon.Code]error{
		pigeon.CodeProgramInvalid:  pigeon.ErrInvalid,
		pigeon.CodeProgramNotFound: pigeon.ErrNotFound,
		pigeon.CodeProgramTrapped:  pigeon.ErrProgram,
		pigeon.CodeProgramTimeout:  pigeon.ErrProgram,
		pigeon.CodeProgramLimit:    pigeon.ErrProgram,
	} {
		require.ErrorIs(t, pigeon.NewError(code, "x"), group, code)
	}
}

// The manifests beside the examples parse.
func TestExampleManifests(t *testing.T) {
	for _, name := range []string{"enricher", "responder", "router"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "programs", name, "manifest.json"))
		require.NoError(t, err)
		_, err = programs.ParseManifest(b)
		require.NoError(t, err, name)
	}
}
