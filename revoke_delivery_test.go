package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// A work-queue consumer whose contract is revoked while its handler holds
// a message settles nothing after the revocation: the handler's answer
// (an acknowledgement, here) comes from a consumer the broker no longer
// trusts, as a pull Ack after the revocation is refused CONTRACT_REVOKED,
// and the message goes to another member of the group. Before, the
// acknowledgement that came after the revocation marked the message done,
// and no other member ever saw it.
func TestRevokedMembersAnswerSettlesNothing(t *testing.T) {
	f := evictFixture(t)
	boss := f.connect("boss-token", "tasks.run")
	alice := f.connect("alice-token", "tasks.run")
	bob := f.connect("bob-token", "tasks.run")

	holding, answer := make(chan string, 1), make(chan error)
	sub, err := alice.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		holding <- d.Message.ID
		return <-answer
	})
	require.NoError(t, err)
	ids := publishTasks(t, boss, 1, 1)
	require.Equal(t, ids[0], <-holding)

	p, err := f.e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	require.NoError(t, f.e.RevokeContract(ctx, p, alice.Contract().ID()))
	answer <- nil // the handler acknowledges after the revocation
	requireStopped(t, sub, pigeon.CodeContractRevoked)

	got := make(chan string, 1)
	_, err = bob.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		select {
		case got <- d.Message.ID:
		default:
		}
		return nil
	})
	require.NoError(t, err)
	select {
	case id := <-got:
		require.Equal(t, ids[0], id)
	case <-time.After(20 * time.Second):
		t.Fatal("the message the revoked member acknowledged never reached another member")
	}
}

// A pull consumer whose contract is revoked while it holds leases gives
// them back to its group at once, as a push consumer that goes away does:
// another consumer of the group receives them now, not once the ack wait
// they were leased for runs out (an hour on jobs.batch), and the revoked
// consumer can no longer ack them. Before, they stayed leased to it for
// the whole ack wait.
func TestRevokedPullConsumersLeasesGoBack(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog, o.Authenticator = base.Catalog, base.Authenticator
	})
	boss := f.connect("boss-token", "jobs.batch")
	for n := range 3 {
		_, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.batch", Intent: "run", Data: json.RawMessage(`{"n":` + itoa(n) + `}`)})
		require.NoError(t, err)
	}
	revoked := f.connect("crew-token", "jobs.batch")
	other := f.connect("crew-token", "jobs.batch")
	held, err := revoked.Receive(ctx, "jobs.batch", 2)
	require.NoError(t, err)
	require.Len(t, held, 2)

	p, err := f.e.Authenticate(ctx, "crew-token")
	require.NoError(t, err)
	require.NoError(t, f.e.RevokeContract(ctx, p, revoked.Contract().ID()))
	requireCode(t, revoked.Ack(ctx, "jobs.batch", held[0].ID), pigeon.CodeContractRevoked)

	// The revocation gives the leases back on a goroutine of its own:
	// what other receives gathers until it holds all three.
	var got []*pigeon.Message
	require.Eventually(t, func() bool {
		more, err := other.Receive(ctx, "jobs.batch", 10)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) >= 3
	}, 10*time.Second, 5*time.Millisecond, "the revoked consumer's leases never went back")
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	require.Len(t, ids, 3, "the revoked consumer's two leases and the third message")
	require.Contains(t, ids, held[0].ID)
	require.Contains(t, ids, held[1].ID)
	for _, m := range got {
		require.NoError(t, other.Ack(ctx, "jobs.batch", m.ID))
	}
}
