package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An expression that means to hold a formatting character writes it as
// a CEL escape, which the linter takes; the zero width joiners and other
// scripts are text, in expressions and names alike. (The characters
// themselves are refused in every name and expression:
// TestLintRefusesControlCharactersInNames.)
func TestLintTakesEscapesAndJoinersAsText(t *testing.T) {
	publish0 := func(p *SubjectPolicy) *RuleSpec { return &p.Policy[OpPublish][0] }
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
