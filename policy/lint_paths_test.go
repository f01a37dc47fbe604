package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLintFieldPathsFoldCase(t *testing.T) {
	const file = "subjects/payments.authorize.json"
	tests := []struct {
		name   string
		mutate func(*SubjectPolicy)
		field  string
		msg    string
		sev    string
	}{
		{"forbidden field repeated in another case", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card.pan", "Card.PAN"} },
			"data.forbiddenFields[1]", `"Card.PAN" is listed twice`, SeverityWarning},
		{"tokenized field repeated in another case", func(p *SubjectPolicy) { p.Data.TokenizedFields = []string{"paymentToken", "PAYMENTTOKEN"} },
			"data.tokenizedFields[1]", `"PAYMENTTOKEN" is listed twice`, SeverityWarning},
		{"routing field is forbidden in another case", func(p *SubjectPolicy) { p.Data.RoutingFields = []string{"Card.Pan"} },
			"data.routingFields[0]", "cannot stay in clear", SeverityError},
		{"routing field is tokenized in another case", func(p *SubjectPolicy) {
			p.Data.TokenizedFields = []string{"paymentToken"}
			p.Data.RoutingFields = []string{"paymenttoken"}
		}, "data.routingFields[0]", "cannot stay in clear", SeverityError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems, err := LintFS(refFS(t, tt.mutate))
			require.NoError(t, err)
			requireProblem(t, problems, file, tt.field, tt.sev, tt.msg)
		})
	}
	// Routing fields are kept in clear by their exact name: two that differ
	// in case are two fields.
	problems, err := LintFS(refFS(t, func(p *SubjectPolicy) { p.Data.RoutingFields = []string{"currency", "Currency"} }))
	require.NoError(t, err)
	for _, p := range problems {
		require.False(t, strings.Contains(p.Message, "listed twice"), p.String())
	}
}
