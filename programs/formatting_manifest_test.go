package programs_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/programs"
)

// reordering are formatting characters that reorder the text around them
// or break its line ("Trojan Source"), which the broker refuses in every
// name as it refuses a control character.
var reordering = []struct{ name, s string }{
	{"RLM U+200F", "\u200f"},
	{"LS U+2028", "\u2028"},
	{"RLO U+202E", "\u202e"},
	{"LRI U+2066", "\u2066"},
}

// A manifest whose names (route.subject, route.group, account, a subject
// of publishes, an env name) or route.filter hold a formatting character
// that reorders or breaks a line is refused PROGRAM_INVALID (check
// "manifest"), as one with a control character is; a filter that means to
// hold one writes it as an escape. An env value is data the program
// reads, not a name, and keeps them, as it keeps tab, newline and CR.
// Before, "orders.in\u202Egnp" parsed as a route's subject and was
// stored, listed and shown reordered.
func TestManifestRefusesFormattingCharactersInNames(t *testing.T) {
	fields := []struct {
		name string
		set  func(m *programs.Manifest, v string)
	}{
		{"route.subject", func(m *programs.Manifest, v string) { m.Route.Subject += v }},
		{"route.group", func(m *programs.Manifest, v string) { m.Route.Group = "g" + v }},
		{"account", func(m *programs.Manifest, v string) { m.Account += v }},
		{"publishes", func(m *programs.Manifest, v string) { m.Publishes = []string{"orders.out" + v} }},
		{"route.filter", func(m *programs.Manifest, v string) { m.Route.Filter = `message.type != "` + v + `"` }},
		{"env name", func(m *programs.Manifest, v string) { m.Env = map[string]string{"K" + v: "v"} }},
	}
	for _, f := range fields {
		for _, r := range reordering {
			t.Run(f.name+"/"+r.name, func(t *testing.T) {
				b, err := json.Marshal(manifest(func(m *programs.Manifest) { f.set(m, r.s) }))
				require.NoError(t, err)
				_, err = programs.ParseManifest(b)
				requireManifestRefused(t, err)
				require.NotContains(t, err.Error(), r.s, "the refusal quotes the name escaped")
			})
		}
	}

	m := manifest(func(m *programs.Manifest) {
		m.Route.Filter = `message.type != "\u202e"`
		m.Env = map[string]string{"GREETING": "\u200fمرحبا\u2066x\u2069"}
	})
	b, err := json.Marshal(m)
	require.NoError(t, err)
	got, err := programs.ParseManifest(b)
	require.NoError(t, err)
	require.Equal(t, m.Env, got.Env)
	require.Equal(t, m.Route.Filter, got.Route.Filter)
}
