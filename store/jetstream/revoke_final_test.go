package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// localNode is a Pigeon engine on one embedded NATS server (R1), as node
// name; with cluster false it has no Cluster, so it never hears of
// another node's changes: a node whose watch has not applied them yet.
func localNode(t *testing.T, url, prefix, name string, cluster bool) *pigeonNode {
	t.Helper()
	s, err := Connect(t.Context(), url, &Options{Prefix: prefix, Node: name, Memory: true, Timeout: 2 * time.Second})
	require.NoError(t, err)
	o := clusterOptions()
	o.Store = s
	var cl *Cluster
	if cluster {
		cl, err = NewCluster(t.Context(), s)
		require.NoError(t, err)
		o.Cluster = cl
	}
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	p := &pigeonNode{e: e, s: s, cl: cl, nc: s.Conn()}
	t.Cleanup(p.stop)
	return p
}

// TestRevocationIsFinal: a renewal on node B that passed B's revocation
// check before B's watch applied node A's revocation writes the contract
// back unrevoked. The record must stay revoked, or every node that loads
// the contract afterwards (one restarted, or one that never held it)
// honours a revoked contract again.
func TestRevocationIsFinal(t *testing.T) {
	srv := runServer(t)
	prefix := freshPrefix()
	a := localNode(t, srv.ClientURL(), prefix, "a", true)
	b := localNode(t, srv.ClientURL(), prefix, "b", false)
	ctx := t.Context()

	sess, err := a.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	c := caller(t, "alice-token", sess)
	_, err = b.e.Publish(ctx, c, chatMsg("lobby", "b holds the contract"))
	require.NoError(t, err)

	require.NoError(t, a.e.RevokeContract(ctx, c.Principal, c.ContractID))
	// B has not applied the revocation yet: its renewal goes through, and
	// saves the contract as B holds it.
	_, _ = b.e.RenewContract(ctx, c.Principal, c.ContractID, time.Hour)

	rec, err := a.s.GetContract(ctx, c.ContractID)
	require.NoError(t, err)
	require.True(t, rec.Revoked, "the stored contract was brought back from its revocation")
	fresh := localNode(t, srv.ClientURL(), prefix, "c", true)
	_, err = fresh.e.Publish(ctx, c, chatMsg("lobby", "after"))
	requireCode(t, err, pigeon.CodeContractRevoked)
}
