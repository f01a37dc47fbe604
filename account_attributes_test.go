package pigeon_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// teamFixture adds the subject team.notes, which the catalog opens by an
// account attribute (team: payments) alone, no role.
func teamFixture(t *testing.T) *fixture {
	return accessFixture(t, func(o *pigeon.Options) {
		byTeam := []pigeon.RuleSpec{{Effect: "allow", Attributes: map[string]string{"team": "payments"}}}
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "team.notes", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"note"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: byTeam, pigeon.OpReceive: byTeam},
		})
		o.Authenticator = pigeon.NewStaticTokens(append(o.Authenticator.(*pigeon.StaticTokens).Tokens(),
			pigeon.StaticToken{Token: "erin-token", Principal: erin, Attributes: map[string]string{"team": "payments"}})...)
	})
}

const erin = "spiffe://chat/erin"

func teamNote() *pigeon.Message {
	return &pigeon.Message{Type: "note", Subject: "team.notes", Intent: "note", Data: []byte(`{"text":"ledger"}`)}
}

// A contract that the catalog granted for the attributes of the caller's
// account lives only as long as that account: once the account is
// deleted, or deleted and created again under its id with other
// attributes, the contract fails its next check, as one granted through
// the account's roles does. Before, it went on publishing and receiving
// for the rest of its TTL (renewals included), and a connection that
// authenticated before the change negotiated new contracts with the old
// attributes.
func TestContractDiesWithTheAccountWhoseAttributesItWasGrantedFor(t *testing.T) {
	payments := pigeon.Account{ID: carol, Attributes: map[string]string{"team": "payments"}}
	marketing := pigeon.Account{ID: carol, Attributes: map[string]string{"team": "marketing"}}
	for _, tc := range []struct {
		name  string
		after *pigeon.Account // created again after the deletion; nil: none
	}{
		{"deleted", nil},
		{"created again with other attributes", &marketing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := teamFixture(t)
			e := f.e
			_, err := e.CreateAccount(ctx, payments)
			require.NoError(t, err)
			p, err := e.Authenticate(ctx, "carol-token")
			require.NoError(t, err)
			s := f.connect("carol-token", "team.notes")
			sub, err := s.Subscribe(ctx, "team.notes", func(context.Context, *pigeon.Delivery) error { return nil })
			require.NoError(t, err)
			_, err = s.Publish(ctx, teamNote())
			require.NoError(t, err)

			require.NoError(t, e.DeleteAccount(ctx, carol))
			if tc.after != nil {
				_, err = e.CreateAccount(ctx, *tc.after)
				require.NoError(t, err)
			}

			_, err = s.Publish(ctx, teamNote())
			requireCode(t, err, pigeon.CodeGrantRevoked)
			_, err = s.Receive(ctx, "team.notes", 10)
			requireCode(t, err, pigeon.CodeGrantRevoked)
			_, err = e.RenewContract(ctx, p, s.Contract().ID(), 0)
			requireCode(t, err, pigeon.CodeGrantRevoked)
			requireStopped(t, sub, pigeon.CodeGrantRevoked)
			// A connection that authenticated before negotiates again.
			_, err = e.Negotiate(ctx, p, "", []string{"team.notes"}, 0)
			requireCode(t, err, pigeon.CodeNoPermittedSubjects)
		})
	}
}

// The account's attributes stay the contract's while the account lives:
// giving it a role does not end a contract granted for its
// attributes, and a contract negotiated without an account is not ended
// when one is created.
func TestContractForAccountAttributesOutlivesOtherChanges(t *testing.T) {
	f := teamFixture(t)
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "payments"}, Roles: []string{"moderator"}})
	require.NoError(t, err)
	s := f.connect("carol-token", "team.notes")
	_, err = e.AddAccountRole(ctx, carol, "writer")
	require.NoError(t, err)
	_, err = s.Publish(ctx, teamNote())
	require.NoError(t, err)

	// erin's credential carries the attribute itself.
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: erin})
	require.NoError(t, err)
	require.NoError(t, e.DeleteAccount(ctx, erin))
	d := f.connect("erin-token", "team.notes")
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: erin})
	require.NoError(t, err)
	_, err = d.Publish(ctx, teamNote())
	require.NoError(t, err, "a contract negotiated without an account is not the account's")
}

// The rules applied to each message see the attributes the contract was
// negotiated with, not those of the connection's authentication: a
// WebSocket connection authenticates once and negotiates again on that
// principal. Before, an account deleted and created again with other
// attributes got a contract for its new attributes (negotiation reads the
// account now), while each message was judged with the old ones, so an
// allow rule of the old attributes admitted what the new account may not
// send.
func TestMessageRulesSeeTheContractsAttributes(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "team.ledger", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"note"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {
				{Effect: "allow", Attributes: map[string]string{"team": "marketing"}, When: `message.data.amount < 10`},
				{Effect: "allow", Attributes: map[string]string{"team": "payments"}},
			}},
		})
	})
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "payments"}})
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, "carol-token") // a connection's upgrade
	require.NoError(t, err)
	require.NoError(t, e.DeleteAccount(ctx, carol))
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "marketing"}})
	require.NoError(t, err)

	k, err := e.Negotiate(ctx, p, "", []string{"team.ledger"}, 0)
	require.NoError(t, err)
	caller := pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}
	amount := func(n int) *pigeon.Message {
		return &pigeon.Message{Type: "note", Subject: "team.ledger", Intent: "note", Data: []byte(`{"amount":` + itoa(n) + `}`)}
	}
	_, err = e.Publish(ctx, caller, amount(5))
	require.NoError(t, err)
	_, err = e.Publish(ctx, caller, amount(1000))
	requireCode(t, err, pigeon.CodePolicyDenied)
}

// A role given to an account meets a catalog deny rule that also names an
// attribute the credential carries itself (an OIDC attribute claim, a
// static token's attributes), not the account: the contract's receive
// ends, as when the attribute is the account's. Before, the check of a
// role given since matched the rule with the account's attributes only,
// so a subscriber went on receiving what the rule refused it.
func TestRoleGivenSinceMeetsADenyRuleOnCredentialAttributes(t *testing.T) {
	// team.notes is opened by team: payments, erin-token's own attribute;
	// the same attribute and the role suspended close its receive.
	f := accessFixture(t, func(o *pigeon.Options) {
		byTeam := []pigeon.RuleSpec{{Effect: "allow", Attributes: map[string]string{"team": "payments"}}}
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "team.notes", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"note"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: byTeam,
				pigeon.OpReceive: append([]pigeon.RuleSpec{{Effect: "deny", Roles: []string{"suspended"}, Attributes: map[string]string{"team": "payments"}}}, byTeam...),
			},
		})
		o.Authenticator = pigeon.NewStaticTokens(pigeon.StaticToken{Token: "erin-token", Principal: erin, Attributes: map[string]string{"team": "payments"}})
	})
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: erin})
	require.NoError(t, err)
	s := f.connect("erin-token", "team.notes")
	_, err = s.Receive(ctx, "team.notes", 10)
	require.NoError(t, err)

	_, err = e.AddAccountRole(ctx, erin, "suspended")
	require.NoError(t, err)
	_, err = s.Receive(ctx, "team.notes", 10)
	requireCode(t, err, pigeon.CodeGrantRevoked)
}

// A contract is held by a credential that carries every attribute the
// negotiating credential carried itself, as it is by one that carries
// every role: contract ids travel in deliveries, and a narrower token of
// the same principal (one without the attribute that opened the subject)
// acted under the wider one's contract.
func TestContractIsNotHeldByACredentialWithoutItsAttributes(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		byTeam := []pigeon.RuleSpec{{Effect: "allow", Attributes: map[string]string{"team": "payments"}}}
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "team.notes", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"note"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				// Each message is judged with the caller's own attributes.
				pigeon.OpPublish: append([]pigeon.RuleSpec{{Effect: "deny", Attributes: map[string]string{"x": "y"}}}, byTeam...),
				pigeon.OpReceive: byTeam,
			},
		})
		o.Authenticator = pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "wide", Principal: erin, Attributes: map[string]string{"team": "payments", "tier": "gold"}},
			pigeon.StaticToken{Token: "same", Principal: erin, Attributes: map[string]string{"team": "payments", "tier": "gold", "x": "y"}},
			pigeon.StaticToken{Token: "other-team", Principal: erin, Attributes: map[string]string{"team": "marketing", "tier": "gold"}},
			pigeon.StaticToken{Token: "narrow", Principal: erin})
	})
	e := f.e
	wide := f.connect("wide", "team.notes")
	id := wide.Contract().ID()
	for _, tc := range []struct {
		token   string
		held    bool
		publish pigeon.Code
	}{
		{"wide", true, pigeon.CodeOK},
		{"same", true, pigeon.CodePolicyDenied},
		{"other-team", false, pigeon.CodeContractPrincipalMismatch},
		{"narrow", false, pigeon.CodeContractPrincipalMismatch},
	} {
		t.Run(tc.token, func(t *testing.T) {
			p, err := e.Authenticate(ctx, tc.token)
			require.NoError(t, err)
			caller := pigeon.Caller{Principal: p, Region: "uk", ContractID: id}
			_, err = e.Publish(ctx, caller, teamNote())
			if tc.publish == pigeon.CodeOK {
				require.NoError(t, err)
			} else {
				requireCode(t, err, tc.publish)
			}
			_, err = e.GetContract(ctx, p, id)
			if tc.held {
				require.NoError(t, err)
				return
			}
			requireCode(t, err, pigeon.CodeContractPrincipalMismatch)
			_, err = e.Receive(ctx, caller, "team.notes", 1)
			requireCode(t, err, pigeon.CodeContractPrincipalMismatch)
		})
	}
}
