package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// The rules applied to each message see the roles the contract holds now,
// not those of the principal a connection authenticated with. A WebSocket
// session authenticates once and publishes on that principal for hours:
// a role given to its account since (one a deny rule that looks at the
// message names) must make that rule apply, and a role given before the
// contract was negotiated (one an allow rule names) must admit. Before,
// the rules matched the roles of the connection's principal, so a muted
// account kept publishing what the rule refuses, and a contract granted
// through a new role refused every message.
func TestMessageRulesSeeTheContractsRoles(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.moderated", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {
					{Effect: "allow", Roles: []string{"poster"}, Intents: []string{"chat"}},
					{Effect: "deny", Roles: []string{"muted"}, When: `message.data.text == "spam"`},
				},
			},
		})
	})
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
	require.NoError(t, err)
	// The connection authenticates before its account has the role.
	conn, err := e.Authenticate(ctx, "carol-token")
	require.NoError(t, err)
	require.Empty(t, conn.Roles)
	_, err = e.AddAccountRole(ctx, carol, "poster")
	require.NoError(t, err)
	c, err := e.Negotiate(ctx, conn, "", []string{"rooms.moderated"}, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"poster"}, c.Info().Roles)

	publish := func(text string) error {
		m := chatIn("lobby", text)
		m.Subject = "rooms.moderated"
		_, err := e.Publish(ctx, pigeon.Caller{Principal: conn, ContractID: c.ID()}, m)
		return err
	}
	require.NoError(t, publish("hello"), "the allow rule names a role the contract holds")
	require.NoError(t, publish("spam"), "not muted yet")

	_, err = e.AddAccountRole(ctx, carol, "muted")
	require.NoError(t, err)
	requireCode(t, publish("spam"), pigeon.CodePolicyDenied)
	require.NoError(t, publish("hello"), "the deny rule looks at the message")

	_, err = e.RemoveAccountRole(ctx, carol, "muted")
	require.NoError(t, err)
	require.NoError(t, publish("spam"), "unmuted")
}
