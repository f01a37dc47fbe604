package programs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// hostile are control characters a manifest could carry into the stored
// program, its listings and program.refused audit records: ESC (an ANSI
// sequence), CSI as one C1 character (U+009B), CR, DEL and NUL.
var hostile = []struct{ name, s string }{
	{"ESC", "\x1b[2J"},
	{"C1 CSI", "\u009b2J"},
	{"CR", "\rok"},
	{"DEL", "\x7f"},
}

// requireManifestRefused requires err to be PROGRAM_INVALID of check
// "manifest".
func requireManifestRefused(t *testing.T, err error) {
	t.Helper()
	require.Equal(t, pigeon.CodeProgramInvalid, pigeon.ErrorCode(err), "%v", err)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "manifest", pe.Details["check"], "%v", err)
}

// A manifest whose names (route.subject, route.group, account, a subject
// of publishes, an env name) hold a control character (C0, DEL, C1), or
// whose route.filter or env value holds one other than tab, newline and
// carriage return, is refused PROGRAM_INVALID (check "manifest"), as it
// is parsed (the HTTP deploy) and when a Manifest is deployed in code;
// tab, newline and CR (lines ended CRLF) in a filter or env value are
// kept. Before, every one of them parsed,
// and only a NUL in an env name or value was refused.
func TestManifestRefusesControlCharacters(t *testing.T) {
	fields := []struct {
		name   string
		set    func(m *programs.Manifest, v string)
		layout bool // a filter or an env value, which may hold CR
	}{
		{"route.subject", func(m *programs.Manifest, v string) { m.Route.Subject += v }, false},
		{"route.group", func(m *programs.Manifest, v string) { m.Route.Group = "g" + v }, false},
		{"account", func(m *programs.Manifest, v string) { m.Account += v }, false},
		{"publishes", func(m *programs.Manifest, v string) { m.Publishes = []string{"orders.out" + v} }, false},
		{"route.filter", func(m *programs.Manifest, v string) { m.Route.Filter = `message.type != "` + v + `"` }, true},
		{"env name", func(m *programs.Manifest, v string) { m.Env = map[string]string{"K" + v: "v"} }, false},
		{"env value", func(m *programs.Manifest, v string) { m.Env = map[string]string{"K": "v" + v} }, true},
	}
	for _, f := range fields {
		for _, h := range hostile {
			if f.layout && h.name == "CR" {
				continue // kept: the subtest below
			}
			t.Run(f.name+"/"+h.name, func(t *testing.T) {
				m := manifest(func(m *programs.Manifest) { f.set(m, h.s) })
				b, err := json.Marshal(m)
				require.NoError(t, err)
				_, err = programs.ParseManifest(b)
				requireManifestRefused(t, err)
			})
		}
	}
	t.Run("tab, newline and CR in a filter and an env value", func(t *testing.T) {
		m := manifest(func(m *programs.Manifest) {
			m.Route.Filter = "true &&\r\n\ttrue"
			m.Env = map[string]string{"CERT": "-----BEGIN-----\nAAAA\n-----END-----\n", "CRLF": "-----BEGIN-----\r\nAAAA\r\n-----END-----\r\n"}
		})
		b, err := json.Marshal(m)
		require.NoError(t, err)
		got, err := programs.ParseManifest(b)
		require.NoError(t, err)
		require.Equal(t, m.Env, got.Env)
	})
}

// A deploy whose manifest holds a control character is refused before
// anything is bound or stored, and its program.refused record carries no
// control character: before, a route.subject with ESC in it was refused
// when it could not be bound, and written raw into the record's subject.
func TestDeployRefusesControlCharactersUnlogged(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			_, err := f.mg.Deploy(ctx, admin, "p", manifest(func(m *programs.Manifest) { m.Route.Subject += h.s }), modOK)
			requireManifestRefused(t, err)
			_, err = f.mg.Get(ctx, "p")
			require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "nothing stored: %v", err)
		})
	}
	refused := f.audited(t, pigeon.EventProgramRefused)
	require.Len(t, refused, len(hostile), "every refusal is audited")
	recs, err := f.e.Audit(ctx, 0, 100000)
	require.NoError(t, err)
	for _, r := range recs {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		for k, v := range fields {
			if s, ok := v.(string); ok {
				require.False(t, strings.ContainsFunc(s, unicode.IsControl), "audit record %s: %s holds a control character: %q", r.Type, k, s)
			}
		}
	}
}
