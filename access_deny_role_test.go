package pigeon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// A role given to an account takes access away when a catalog deny rule
// names it: every contract and subscription of the account that holds an
// operation the rule refuses fails its next check with GRANT_REVOKED, as
// when a role is taken away. Before, only a negotiation or a request
// authenticated afresh saw the new role: a session that connected before
// (in process, or a WebSocket connection) went on publishing, and a
// running subscription went on receiving, though a deny rule now refused
// the principal.
func TestRoleGivenSinceMeetsADenyRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		account string // whom the role is given to
		role    string
		revoked bool
	}{
		{"a role a publish deny rule names", carol, "muted", true},
		{"a role a receive deny rule names", carol, "deafened", true},
		{"a role a deny rule names, only with a region it is not in", carol, "banned-in-eu", false},
		{"a role a message-dependent deny rule names", carol, "no-spam", false}, // judged per message
		{"a role no rule names", carol, "unrelated", false},
		{"a denied role given to another account", dave, "muted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *pigeon.Options) {
				base := transporttest.Options()
				o.Catalog = base.Catalog
				o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
					Name: "rooms.chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
					Policy: map[pigeon.Operation][]pigeon.RuleSpec{
						pigeon.OpPublish: {
							{Effect: "deny", Roles: []string{"muted"}},
							{Effect: "deny", Roles: []string{"banned-in-eu"}, Regions: []string{"eu"}},
							{Effect: "deny", Roles: []string{"no-spam"}, When: `message.data.text == "spam"`},
						},
						pigeon.OpReceive: {
							{Effect: "deny", Roles: []string{"deafened"}},
							{Effect: "allow", Roles: []string{"listener"}},
						},
					},
				})
				o.Authenticator = pigeon.NewStaticTokens(
					pigeon.StaticToken{Token: "carol-token", Principal: carol},
					pigeon.StaticToken{Token: "dave-token", Principal: dave})
				o.Now = nil
			})
			e := f.e
			_, err := e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{
				{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
			require.NoError(t, err)
			for _, id := range []string{carol, dave} {
				_, err = e.CreateAccount(ctx, pigeon.Account{ID: id, Roles: []string{"writer", "listener"}})
				require.NoError(t, err)
			}
			c := f.connect("carol-token", "rooms.chat")
			got := make(chan string, 10)
			sub, err := c.Subscribe(ctx, "rooms.chat", func(_ context.Context, d *pigeon.Delivery) error {
				got <- string(d.Message.Data)
				return nil
			})
			require.NoError(t, err)
			_, err = c.Publish(ctx, chatIn("lobby", "before"))
			require.NoError(t, err)
			select {
			case <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("nothing delivered")
			}

			_, err = e.AddAccountRole(ctx, tc.account, tc.role)
			require.NoError(t, err)
			_, err = c.Publish(ctx, chatIn("lobby", "after"))
			if !tc.revoked {
				require.NoError(t, err)
				select {
				case <-got:
				case <-time.After(30 * time.Second):
					t.Fatal("the subscription stopped receiving")
				}
				require.NoError(t, sub.Err())
				return
			}
			requireCode(t, err, pigeon.CodeGrantRevoked)
			requireStopped(t, sub, pigeon.CodeGrantRevoked)
			k, err := e.Connect(ctx, "carol-token", []string{"rooms.chat"})
			require.NoError(t, err, "negotiating again gets the narrower contract")
			defer k.Close(ctx)
			require.NotEqual(t, k.Contract().Allows("rooms.chat", pigeon.OpPublish), k.Contract().Allows("rooms.chat", pigeon.OpReceive),
				"one operation is denied now, the other is not")
		})
	}
}
