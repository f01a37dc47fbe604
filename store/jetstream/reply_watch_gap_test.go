package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReplyNoticeWrittenWhileTheWatchIsDownArrives: a reply for a
// requester on node b travels as a notice in the <P>_replies bucket, and
// b reads it through its Cluster's watch. A watch that ends (a NATS node
// lost, the watch stalled) is begun again by the engine, and the new one
// read only notices written from then on: one written in between was
// never delivered, and the requester on b waited for its timeout
// although the replier had been answered "accepted". The notices written
// before the Cluster was made are not delivered to its first watch; a
// watch begun again reads from the first notice its node has not read,
// so each is delivered once.
func TestReplyNoticeWrittenWhileTheWatchIsDownArrives(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()
	_, a := prefixNode(ctx, t, srv.ClientURL(), prefix, "a")
	reply := func(id string) pigeon.ClusterChange {
		return pigeon.ClusterChange{Kind: pigeon.ChangeReply, RequestID: id, Requester: "bob", Reply: &pigeon.Message{ID: "rep-" + id}}
	}
	require.NoError(t, a.NotifyReply(ctx, reply("before b")))
	_, b := prefixNode(ctx, t, srv.ClientURL(), prefix, "b")

	got := make(chan string, 16)
	// watch runs one watch of b until the returned func ends it.
	watch := func() func() {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.Watch(wctx, func(c pigeon.ClusterChange) {
				if c.Kind == pigeon.ChangeReply {
					got <- c.RequestID
				}
			})
		}()
		require.Eventually(t, func() bool {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.ready
		}, 10*time.Second, 5*time.Millisecond, "node b's watch never began")
		return func() { stop(); <-done }
	}
	next := func() string {
		t.Helper()
		select {
		case id := <-got:
			return id
		case <-time.After(10 * time.Second):
			t.Fatal("no reply notice reached node b")
			return ""
		}
	}

	stop := watch()
	require.NoError(t, a.NotifyReply(ctx, reply("first")))
	require.Equal(t, "first", next(), "a notice written before the Cluster was made is not one its first watch delivers")
	stop()

	require.NoError(t, a.NotifyReply(ctx, reply("while down")))
	require.NoError(t, a.NotifyReply(ctx, reply("while down too")))
	stop = watch()
	defer stop()
	require.Equal(t, "while down", next())
	require.Equal(t, "while down too", next())
	require.NoError(t, a.NotifyReply(ctx, reply("after")))
	require.Equal(t, "after", next(), "each notice is delivered once")
	select {
	case id := <-got:
		t.Fatalf("notice %s delivered again", id)
	default:
	}
}
