package jetstream

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// extendAckWait is jobs.cluster's ack wait in TestALeaseIsHeldAcrossTheClusterWhileItsHandlerRuns:
// long enough that an extension, due with a third of it left, lands in
// time on a loaded test machine.
const extendAckWait = 2 * time.Second

// A push subscription's handler on one node runs for three ack waits: the
// message's cluster lease is extended meanwhile, so a consumer of the
// same group on another node does not get the message while it runs (on
// one node the lease is held while the handler runs; before, in a
// cluster, it ended at the ack wait for the other nodes, whose consumers
// then ran the message too). A node that dies mid-run stops extending:
// the other node gets the message once its last extension runs out.
func TestALeaseIsHeldAcrossTheClusterWhileItsHandlerRuns(t *testing.T) {
	nc := startNATSCluster(t)
	prefix := freshPrefix()
	shortAck := func(o *pigeon.Options) {
		for i := range o.Catalog.Subjects {
			if o.Catalog.Subjects[i].Name == "jobs.cluster" {
				o.Catalog.Subjects[i].Delivery.AckWaitMs = extendAckWait.Milliseconds()
			}
		}
	}
	var nodes []*pigeonNode
	for i := range 3 {
		nodes = append(nodes, nc.startPigeon(t, i, prefix, shortAck))
	}
	ctx := t.Context()
	connect := func(e *pigeon.Engine, token string) pigeon.Session {
		sess, err := e.Connect(ctx, token, []string{"jobs.cluster"})
		require.NoError(t, err)
		return sess
	}
	boss := connect(nodes[0].e, "boss-token")

	// runs subscribes on node e to group (which starts at the subject's
	// first message), recording the runs of message id on got; each of
	// them blocks until hold returns. Other messages are acknowledged.
	runs := func(e *pigeon.Engine, group, id string, got chan<- string, hold func(context.Context)) pigeon.Subscription {
		sub, err := connect(e, "crew-token").Subscribe(ctx, "jobs.cluster", func(hctx context.Context, d *pigeon.Delivery) error {
			if d.Message.ID != id {
				return nil
			}
			got <- d.Message.ID
			hold(hctx)
			return nil
		}, pigeon.WithGroup(group))
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
		return sub
	}
	started := func(got <-chan string, what string) {
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s never ran the message", what)
		}
	}

	t.Run("NotTakenWhileItRuns", func(t *testing.T) {
		onA, onB := make(chan string, 8), make(chan string, 8)
		res, err := boss.Publish(ctx, jobMsg(1))
		require.NoError(t, err)
		id := res.Message.ID
		runs(nodes[0].e, "held", id, onA, func(context.Context) { time.Sleep(3 * extendAckWait) })
		started(onA, "node A")
		t0 := time.Now()
		runs(nodes[1].e, "held", id, onB, func(context.Context) {})
		// A's handler runs until t0 + 3 ack waits and then acknowledges;
		// one ack wait more lets a late redelivery show.
		select {
		case <-onB:
			t.Fatalf("node B ran %s %s after node A's handler started, while it still ran (ack wait %s)", id, time.Since(t0).Round(time.Millisecond), extendAckWait)
		case <-onA:
			t.Fatalf("node A ran %s again while its first run went on", id)
		case <-time.After(4 * extendAckWait):
		}
	})

	t.Run("TakenWhenTheNodeDies", func(t *testing.T) {
		onC, onB := make(chan string, 8), make(chan string, 8)
		var once sync.Once
		unblock := make(chan struct{})
		t.Cleanup(func() { once.Do(func() { close(unblock) }) })
		res, err := boss.Publish(ctx, jobMsg(2))
		require.NoError(t, err)
		id := res.Message.ID
		runs(nodes[2].e, "dies", id, onC, func(hctx context.Context) {
			select {
			case <-unblock:
			case <-hctx.Done():
			}
		})
		started(onC, "node C")
		runs(nodes[1].e, "dies", id, onB, func(context.Context) {})
		select {
		case <-onB:
			t.Fatalf("node B ran %s while node C's handler ran", id)
		case <-time.After(extendAckWait + extendAckWait/2):
		}
		// Node C is cut off from NATS mid-run, past the ack wait, as a
		// node killed: it extends no more.
		killed := time.Now()
		nodes[2].nc.Close()
		select {
		case <-onB:
			require.Less(t, time.Since(killed), 2*extendAckWait+5*time.Second)
		case <-time.After(2*extendAckWait + 5*time.Second):
			t.Fatal("node B never got the message of the dead node")
		}
	})
}
