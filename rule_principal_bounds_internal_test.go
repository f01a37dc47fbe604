package pigeon

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRulePrincipalMergedAgainRefusedPastTheBounds: a credential that
// authenticated while its account existed, acting under a contract
// negotiated after the account was deleted, is merged again with the
// account for the rules (rulePrincipal): checkContractAt holds that merge
// to a principal's bounds (ruleBounds), and rulePrincipal reads the
// account again right after. An account created, with attributes of its
// own, in that instant would have the operation's rules see the caller
// carry its credential's MaxAccountAttributes attributes and the
// account's. The publish and the replay are refused GRANT_REVOKED, with
// the reason checkContract gives for the contract from then on, before
// any rule is applied, and nothing is published. Before, rulePrincipal
// could not refuse: the rules judged the principal past the bounds, and
// the publish was accepted, the replay refused by a deny rule naming the
// account's attribute (REPLAY_DENIED).
func TestRulePrincipalMergedAgainRefusedPastTheBounds(t *testing.T) {
	const carol = "carol"
	cases := []struct {
		name string
		op   func(ctx context.Context, e *Engine, c Caller) error
	}{
		{"publish", func(ctx context.Context, e *Engine, c Caller) error {
			_, err := e.Publish(ctx, c, &Message{Type: "test", Subject: "t.x", Intent: "test", Data: json.RawMessage(`{"n":1}`)})
			return err
		}},
		{"replay", func(ctx context.Context, e *Engine, c Caller) error {
			_, err := e.Replay(ctx, c, ReplayRequest{Subject: "t.x"})
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			allow := []RuleSpec{{Effect: "allow", Principals: []string{carol}}}
			e, err := New(ctx, &Options{
				Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: carol, Attributes: attrsNamed("c", MaxAccountAttributes, "v")}),
				Catalog: &Catalog{Subjects: []SubjectPolicy{{
					Name: "t.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"},
					Replay: ReplayPolicy{Allowed: true},
					Policy: map[Operation][]RuleSpec{OpPublish: allow, OpReplay: append([]RuleSpec{
						{Effect: "deny", When: `"team" in principal.attributes`},
					}, allow...)},
				}}},
			})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })

			_, err = e.CreateAccount(ctx, Account{ID: carol})
			require.NoError(t, err)
			p, err := e.Authenticate(ctx, "t")
			require.NoError(t, err)
			require.NoError(t, e.DeleteAccount(ctx, carol))
			info, err := e.Negotiate(ctx, p, "", []string{"t.x"}, time.Minute)
			require.NoError(t, err, "negotiated with no account")
			caller := Caller{Principal: p, ContractID: info.ID()}
			require.NoError(t, tc.op(ctx, e, caller), "merged again with no account: within the bounds")

			c, err := e.lookupContract(ctx, info.ID())
			require.NoError(t, err)
			created := false
			c.ruleBoundsHeld = func() {
				if created {
					return
				}
				created = true
				_, err := e.CreateAccount(ctx, Account{ID: carol, Attributes: map[string]string{"team": "payments"}})
				require.NoError(t, err, "the account alone is within its bounds")
			}
			_, last, err := e.store.Bounds(ctx, "t.x")
			require.NoError(t, err)

			err = tc.op(ctx, e, caller)
			require.True(t, created, "the account was created after checkContractAt held the merge to the bounds")
			require.Equal(t, CodeGrantRevoked, ErrorCode(err), "%v", err)
			_, code, reason := e.checkContract(ctx, info.ID(), p, e.subject("t.x"), OpPublish)
			require.Equal(t, CodeGrantRevoked, code)
			require.Contains(t, err.Error(), reason, "the reason checkContract gives from then on")
			_, after, err := e.store.Bounds(ctx, "t.x")
			require.NoError(t, err)
			require.Equal(t, last, after, "nothing published")
		})
	}
}
