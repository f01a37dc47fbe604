package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A contract negotiated while its principal had no account counts the
// account created since: its roles already made a deny rule that names
// them end the contract; its attributes do too now. Before, a deny rule
// that does not look at the message and names an attribute of the new
// account (status: suspended) was missed, while the message rules saw
// that attribute: the subscriber went on receiving what negotiating
// again would refuse it.
func TestAccountCreatedSinceMeetsADenyRuleOnItsAttributes(t *testing.T) {
	fixture := func(t *testing.T) *fixture {
		return accessFixture(t, func(o *pigeon.Options) {
			byTeam := []pigeon.RuleSpec{{Effect: "allow", Attributes: map[string]string{"team": "payments"}}}
			o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
				Name: "team.notes", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"note"},
				Policy: map[pigeon.Operation][]pigeon.RuleSpec{
					pigeon.OpPublish: byTeam,
					pigeon.OpReceive: append([]pigeon.RuleSpec{{Effect: "deny", Attributes: map[string]string{"status": "suspended"}}}, byTeam...),
				},
			})
			o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "erin-token", Principal: erin, Attributes: map[string]string{"team": "payments"}})
		})
	}
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		want  pigeon.Code
	}{
		{"an attribute the deny rule names", map[string]string{"status": "suspended"}, pigeon.CodeGrantRevoked},
		{"other attributes", map[string]string{"status": "active"}, pigeon.CodeOK},
		{"no attributes", nil, pigeon.CodeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture(t)
			s := f.connect("erin-token", "team.notes")
			_, err := s.Receive(ctx, "team.notes", 10)
			require.NoError(t, err)

			_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: erin, Attributes: tc.attrs})
			require.NoError(t, err)
			_, err = s.Receive(ctx, "team.notes", 10)
			if tc.want == pigeon.CodeOK {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, tc.want)
		})
	}
}
