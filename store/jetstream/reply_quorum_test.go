package jetstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// TestReplyNoticeAcrossLostQuorum: a reply whose requester waits on
// another node travels as a key of the <P>_replies bucket (R3). Notify
// wrote it with one Put and, when the Put failed (two of three NATS nodes
// killed: no quorum), dropped it without a word: the replier had been
// told "accepted", nothing counted or returned the failure, and the
// requester waited for its timeout. NotifyReply now returns
// store.ErrNoQuorum for a notice it could not write within its ctx, and
// Notify (which returns nothing) counts it in LostReplies. A write the
// bucket does not answer is tried again within the bound, every try under
// one deduplication id, so a quorum back in time carries the notice once.
func TestReplyNoticeAcrossLostQuorum(t *testing.T) {
	c := startNATSCluster(t)
	prefix := freshPrefix()
	ctx := t.Context()
	open := func(node string, timeout time.Duration) *Cluster {
		var s *Store
		require.Eventually(t, func() bool { // JetStream serves once the nodes agree on a meta leader
			var err error
			s, err = Connect(ctx, c.urls(0), &Options{Prefix: prefix, Replicas: 3, Node: node, Timeout: timeout},
				nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(time.Second))
			return err == nil
		}, 60*time.Second, 200*time.Millisecond)
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		cl, err := NewCluster(ctx, s)
		require.NoError(t, err)
		return cl
	}
	open("first", 2*time.Second)         // the cluster is ready
	long := open("long", 30*time.Second) // outlasts the nodes' restart
	watcher := open("watcher", 10*time.Second)
	short := open("short", 2*time.Second) // gives up while the quorum is lost

	got := make(chan string, 16)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		for wctx.Err() == nil { // a watch the node losses ended starts again, as the engine's does
			_ = watcher.Watch(wctx, func(ch pigeon.ClusterChange) {
				if ch.Kind == pigeon.ChangeReply {
					got <- ch.RequestID
				}
			})
		}
	})
	reply := func(id string) pigeon.ClusterChange {
		return pigeon.ClusterChange{Kind: pigeon.ChangeReply, RequestID: id, Requester: "bob", Reply: &pigeon.Message{ID: "rep-" + id}}
	}
	// await waits for the notice of id; a notice whose write failed may
	// come too (a publish the bucket did not answer in time may still
	// have been kept: store.ErrNoQuorum says "maybe").
	await := func(id string) {
		t.Helper()
		deadline := time.After(90 * time.Second)
		for {
			select {
			case seen := <-got:
				if seen == id {
					return
				}
				require.Contains(t, []string{"lost", "lost too"}, seen)
			case <-deadline:
				t.Fatalf("reply %s never reached the other node", id)
			}
		}
	}
	// The watch is in place once a notice gets through.
	for i := 0; ; i++ {
		long.Notify(reply("ready"))
		select {
		case id := <-got:
			require.Equal(t, "ready", id)
		case <-time.After(2 * time.Second):
			require.Less(t, i, 30, "the watch never started")
			continue
		}
		break
	}

	c.nodes[1].kill()
	c.nodes[2].kill()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := short.NotifyReply(sctx, reply("lost"))
	// Told, whichever ends the tries first: the bucket's refusal
	// (ErrNoQuorum) or the caller's deadline while it does not answer.
	require.True(t, errors.Is(err, store.ErrNoQuorum) || errors.Is(err, context.DeadlineExceeded), "%v", err)
	require.Equal(t, uint64(1), short.LostReplies())
	short.Notify(reply("lost too"))
	require.Equal(t, uint64(2), short.LostReplies(), "Notify counts what it could not write")

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		long.Notify(reply("kept"))
	}()
	c.start(t, c.nodes[1])
	c.start(t, c.nodes[2])
	<-sent
	await("kept")
	require.Zero(t, long.LostReplies())
}
