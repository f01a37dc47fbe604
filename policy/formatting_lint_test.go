package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// reorderingText are formatting characters that reorder the text around
// them or break its line ("Trojan Source"): the broker refuses them in
// every name, as it refuses a control character.
var reorderingText = []struct{ name, s string }{
	{"ALM U+061C", "\u061c"},
	{"RLM U+200F", "\u200f"},
	{"LS U+2028", "\u2028"},
	{"RLE U+202B", "\u202b"},
	{"RLO U+202E", "\u202e"},
	{"LRI U+2066", "\u2066"},
	{"PDI U+2069", "\u2069"},
}

// requireNoRawFormatting fails when a problem carries a formatting
// character raw, in its subject, field or message.
func requireNoRawFormatting(t *testing.T, problems []Problem) {
	t.Helper()
	for _, p := range problems {
		for _, s := range []string{p.Subject, p.Field, p.Message, p.String()} {
			for _, f := range reorderingText {
				require.NotContains(t, s, f.s, "problem carries a formatting character raw: %q", s)
			}
		}
	}
}

// A name or value of a policy file (the subject's name first among them)
// or an expression that holds a formatting character that reorders or
// breaks a line is an error problem at its field, when the catalog is
// loaded from files and when it is linted in code (the broker lints every
// catalog it registers), and no problem carries the character raw. An
// expression that means to hold one writes it as a CEL escape. Before,
// the linter refused only control characters: a subject
// "payments.authorize\u202E" was registered, though the engine refuses
// the same name in a message, a role or a principal.
func TestLintRefusesFormattingCharactersInNames(t *testing.T) {
	publish0 := func(p *SubjectPolicy) *RuleSpec { return &p.Policy[OpPublish][0] }
	fields := []struct {
		field string
		set   func(p *SubjectPolicy, v string)
	}{
		{"name", func(p *SubjectPolicy, v string) { p.Name += v }},
		{"version", func(p *SubjectPolicy, v string) { p.Version += v }},
		{"schema.name", func(p *SubjectPolicy, v string) { p.Schema.Name += v }},
		{"data.classification", func(p *SubjectPolicy, v string) { p.Data.Classification += v }},
		{"policy.publish[0].principals[0]", func(p *SubjectPolicy, v string) { publish0(p).Principals = []string{"spiffe://x" + v} }},
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
	for _, f := range fields {
		for _, r := range reorderingText {
			t.Run(f.field+"/"+r.name, func(t *testing.T) {
				problems, err := LintFS(refFS(t, func(p *SubjectPolicy) { f.set(p, r.s) }))
				require.NoError(t, err)
				requireErrorAt(t, problems, file, f.field)
				requireNoRawFormatting(t, problems)

				c, err := LoadFS(refFS(t, func(p *SubjectPolicy) { f.set(p, r.s) }))
				require.NoError(t, err)
				problems = Lint(c)
				requireErrorAt(t, problems, file, f.field)
				requireNoRawFormatting(t, problems)
			})
		}
	}

	// The escape is the expression's way to the character; the zero
	// width joiners and other scripts are text.
	problems, err := LintFS(refFS(t, func(p *SubjectPolicy) {
		publish0(p).When = `principal.id != "a\u202eb" && principal.id != "` + "👩\u200d💻مرحبا" + `"`
		p.Rules = []QualityRule{{Name: "positive", Expr: `message.type != "\u2066"`}}
		p.Data.Classification = "équipe\u200cخواهم"
	}))
	require.NoError(t, err)
	for _, p := range errorsOnly(problems) {
		require.False(t, strings.HasPrefix(p.Field, "policy.publish[0].when") || strings.HasPrefix(p.Field, "rules[0]") || p.Field == "data.classification", "%v", p)
	}
}
