package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A pull Nack ends the node's cluster-wide lease, as a push handler's
// failure does: a consumer on another node gets the message once the
// nack's delay has passed (none here), not once the ack wait the lease was
// taken for (an hour on jobs.batch) runs out. Before, the nack changed
// only the nacking node's memory, and every other node saw the message
// held by it until the ack wait ended.
func TestPullNackFreesTheClusterLease(t *testing.T) {
	_, es := twoNodes(t)
	boss, err := es[0].Connect(ctx, "boss-token", []string{"jobs.batch"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = boss.Close(context.Background()) })
	_, err = boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.batch", Intent: "run", Data: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)

	var crews [2]pigeon.Session
	for i, e := range es {
		crews[i], err = e.Connect(ctx, "crew-token", []string{"jobs.batch"})
		require.NoError(t, err)
		c := crews[i]
		t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	got, err := crews[0].Receive(ctx, "jobs.batch", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, crews[0].Nack(ctx, "jobs.batch", got[0].ID, 0))

	var again []*pigeon.Message
	require.Eventually(t, func() bool {
		again, err = crews[1].Receive(ctx, "jobs.batch", 1)
		require.NoError(t, err)
		return len(again) == 1
	}, 10*time.Second, 10*time.Millisecond, "the other node never got the nacked message")
	require.Equal(t, got[0].ID, again[0].ID)
}
