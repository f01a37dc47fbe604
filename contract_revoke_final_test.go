package pigeon_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/transporttest"
)

// TestClusterRevocationStaysFinal: node a revokes a contract; node b, which
// holds it and has not heard of the revocation (the hub carries no
// contract change unless the test tells it, as a Cluster whose notice has
// not arrived yet), renews it, and its renewal writes the contract as b
// holds it: not revoked, with a later expiry. Before, the memory and wal
// stores replaced the stored revocation with that write, and every node
// that loaded the contract afterwards (one that never held it, a
// restarted one) honoured it again, as did b once told of the change.
// Now the store keeps the revocation: each of them refuses the contract
// CONTRACT_REVOKED.
func TestClusterRevocationStaysFinal(t *testing.T) {
	for _, tc := range []struct {
		name string
		// loader is the node that loads the contract from the store
		// after b's renewal.
		loader func(t *testing.T, c *nodePair) *pigeon.Engine
	}{
		{"a node that never held it", func(t *testing.T, c *nodePair) *pigeon.Engine {
			o := transporttest.Options()
			o.Store, o.Cluster = viewOf(c.shared), c.h.node()
			return startEngine(t, o)
		}},
		{"the revoking node restarted", func(t *testing.T, c *nodePair) *pigeon.Engine {
			require.NoError(t, c.a.Shutdown(ctx))
			o := transporttest.Options()
			o.Store, o.Cluster = viewOf(c.shared), c.h.node()
			return startEngine(t, o)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startNodePair(t, transporttest.Options, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
				return view, h.node()
			})
			sess, err := c.b.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer sess.Close(ctx)
			id := sess.Contract().ID()
			onA, err := c.a.Authenticate(ctx, "alice-token")
			require.NoError(t, err)
			onB, err := c.b.Authenticate(ctx, "alice-token")
			require.NoError(t, err)

			require.NoError(t, c.a.RevokeContract(ctx, onA, id))
			// b has not heard of the revocation: its renewal goes through
			// and saves the contract as b holds it.
			_, err = c.b.RenewContract(ctx, onB, id, time.Hour)
			require.NoError(t, err, "b renews a contract it has not heard was revoked")

			rec, err := c.shared.GetContract(ctx, id)
			require.NoError(t, err)
			require.True(t, rec.Revoked, "the stored contract was brought back from its revocation")

			loader := tc.loader(t, c)
			caller := pigeon.Caller{Principal: onA, Region: "uk", ContractID: id}
			_, err = loader.Publish(ctx, caller, chatText("after the revocation"))
			requireCode(t, err, pigeon.CodeContractRevoked)
			_, err = loader.RenewContract(ctx, onA, id, time.Hour)
			requireCode(t, err, pigeon.CodeContractRevoked)

			// Told of the change without being told what it is, b reads
			// the stored contract and revokes its own copy.
			c.h.broadcast(c.aNode, pigeon.ClusterChange{Kind: pigeon.ChangeContract, ContractID: id})
			require.Eventually(t, func() bool {
				_, err := sess.Publish(ctx, chatText("on b"))
				return pigeon.ErrorCode(err) == pigeon.CodeContractRevoked
			}, 10*time.Second, 5*time.Millisecond, "b, told of the change, honours the contract it read back")
		})
	}
}
