package policy

import (
	"strconv"
	"strings"
	"testing"

	"pigeon/internal/textrule"

	"github.com/stretchr/testify/require"
)

// hostileText are control characters a name of a policy file could carry
// into audit records, receipts, the data directory and every listing of
// the catalog: ESC (an ANSI sequence), CSI as one C1 character (U+009B),
// CR, LF, DEL and NUL; and formatting characters that reorder the text
// around them or break its line ("Trojan Source"), which the broker
// refuses in every name as it refuses a control character.
var hostileText = []struct{ name, s string }{
	{"ESC", "\x1b[2J"},
	{"C1 CSI", "\u009b2J"},
	{"CR", "\rok"},
	{"LF", "\nok"},
	{"DEL", "\x7f"},
	{"NUL", "\x00"},
	{"ALM U+061C", "\u061c"},
	{"RLM U+200F", "\u200f"},
	{"LS U+2028", "\u2028"},
	{"RLE U+202B", "\u202b"},
	{"RLO U+202E", "\u202e"},
	{"LRI U+2066", "\u2066"},
	{"PDI U+2069", "\u2069"},
}

// requireNoRawControl fails when a problem carries a control or
// formatting character raw (the rule of names, internal/textrule), in its
// subject, field or message: a lint report is printed.
func requireNoRawControl(t *testing.T, problems []Problem) {
	t.Helper()
	for _, p := range problems {
		for _, s := range []string{p.Subject, p.Field, p.Message, p.String()} {
			require.False(t, strings.ContainsFunc(s, textrule.IsControlRune), "problem carries a control or formatting character raw: %q", s)
		}
	}
}

// A name or value of a policy file that holds a control character (C0,
// DEL, C1) or a formatting character that reorders text or breaks a line
// is an error problem at its field, both when the catalog is
// loaded from files (pigeon policy lint, LoadDir) and when it is linted in
// code (the broker lints every catalog it registers), and no problem
// carries the character raw. Before, every one of these fields took ESC,
// CSI and CR (the subject name and the version only refused tab, CR and
// LF), and the broker registered them.
func TestLintRefusesControlCharactersInNames(t *testing.T) {
	publish0 := func(p *SubjectPolicy) *RuleSpec { return &p.Policy[OpPublish][0] }
	fields := []struct {
		field string
		set   func(p *SubjectPolicy, v string)
	}{
		{"name", func(p *SubjectPolicy, v string) { p.Name += v }},
		{"version", func(p *SubjectPolicy, v string) { p.Version += v }},
		{"intents[1]", func(p *SubjectPolicy, v string) { p.Intents = append(p.Intents, "audit"+v) }},
		{"schema.name", func(p *SubjectPolicy, v string) { p.Schema.Name += v }},
		{"regionPolicy.home", func(p *SubjectPolicy, v string) { p.RegionPolicy.Home = "uk" + v }},
		{"regionPolicy.allowedRegions[0]", func(p *SubjectPolicy, v string) { p.RegionPolicy.AllowedRegions[0] += v }},
		{"data.classification", func(p *SubjectPolicy, v string) { p.Data.Classification += v }},
		{"data.forbiddenFields[0]", func(p *SubjectPolicy, v string) { p.Data.ForbiddenFields = []string{"card" + v} }},
		{"delivery.idempotency.key", func(p *SubjectPolicy, v string) { p.Delivery.Idempotency.Key = "data.key" + v }},
		{"policy.publish[0].principals[0]", func(p *SubjectPolicy, v string) { publish0(p).Principals = []string{"spiffe://x" + v} }},
		{"policy.publish[0].roles[0]", func(p *SubjectPolicy, v string) { publish0(p).Roles = []string{"admin" + v} }},
		{"policy.publish[0].intents[0]", func(p *SubjectPolicy, v string) { publish0(p).Intents = []string{p.Intents[0] + v} }},
		{"policy.publish[0].regions[0]", func(p *SubjectPolicy, v string) { publish0(p).Regions = []string{"uk" + v} }},
		{"policy.publish[0].attributes", func(p *SubjectPolicy, v string) { publish0(p).Attributes = map[string]string{"team" + v: "x"} }},
		{"policy.publish[0].attributes.team", func(p *SubjectPolicy, v string) { publish0(p).Attributes = map[string]string{"team": "pay" + v} }},
		{"policy.publish[0].when", func(p *SubjectPolicy, v string) { publish0(p).When = `principal.id == "a` + v + `"` }},
		{"rules[0].name", func(p *SubjectPolicy, v string) {
			p.Rules = []QualityRule{{Name: "positive" + v, Expr: "true"}}
		}},
		{"rules[0].expr", func(p *SubjectPolicy, v string) {
			p.Rules = []QualityRule{{Name: "positive", Expr: `message.type != "` + v + `"`}}
		}},
	}
	const file = "subjects/payments.authorize.json"
	clean, err := LintFS(refFS(t, func(*SubjectPolicy) {}))
	require.NoError(t, err)
	require.Empty(t, errorsOnly(clean), "the unchanged catalog lints clean")
	for _, f := range fields {
		for _, h := range hostileText {
			t.Run(f.field+"/"+h.name, func(t *testing.T) {
				problems, err := LintFS(refFS(t, func(p *SubjectPolicy) { f.set(p, h.s) }))
				require.NoError(t, err)
				requireErrorAt(t, problems, file, f.field)
				requireNoRawControl(t, problems)

				// The catalog built in code, as the broker lints it.
				c, err := LoadFS(refFS(t, func(p *SubjectPolicy) { f.set(p, h.s) }))
				require.NoError(t, err)
				problems = Lint(c)
				requireErrorAt(t, problems, file, f.field)
				requireNoRawControl(t, problems)
			})
		}
	}
}

// A catalog built in code whose schema (a map key, never a file name) is
// named with a control character is refused, and its problem quotes it.
func TestLintRefusesControlCharactersInSchemaNames(t *testing.T) {
	for _, h := range hostileText {
		t.Run(h.name, func(t *testing.T) {
			c := &Catalog{Schemas: map[string][]byte{"evil" + h.s: []byte(`{"type":"object"}`)}}
			problems := Lint(c)
			requireErrorAt(t, problems, "", "schemas."+strconv.Quote("evil"+h.s))
			requireNoRawControl(t, problems)
		})
	}
}

// requireErrorAt fails unless problems holds an error at file and field.
func requireErrorAt(t *testing.T, problems []Problem, file, field string) {
	t.Helper()
	for _, p := range problems {
		if p.File == file && p.Field == field && p.IsError() {
			return
		}
	}
	require.Failf(t, "no error", "want an error at %s: %s; got %v", file, field, problems)
}
