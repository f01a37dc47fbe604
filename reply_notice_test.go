package pigeon_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// failingNotifier is a hub node whose reply notices fail while fail is
// set, as those of a cluster whose shared store lost its quorum.
type failingNotifier struct {
	*hubNode
	fail atomic.Bool
}

func (n *failingNotifier) NotifyReply(_ context.Context, c pigeon.ClusterChange) error {
	if n.fail.Load() {
		return errors.New("no quorum")
	}
	n.hubNode.Notify(c)
	return nil
}

// Notify drops a reply's notice while fail is set, without a word.
func (n *failingNotifier) Notify(c pigeon.ClusterChange) {
	if c.Kind == pigeon.ChangeReply && n.fail.Load() {
		return
	}
	n.hubNode.Notify(c)
}

// TestReplyNoticeNotWrittenIsTold: a reply whose notice to the other
// nodes the Cluster could not write (ClusterReplyNotifier) is answered
// CLUSTER_UNCONFIRMED, so that the replier learns a requester on another
// node may not get it; with the notice written, the reply crosses nodes.
// Before, Notify returned nothing: the reply was answered accepted while
// the requester only timed out.
func TestReplyNoticeNotWrittenIsTold(t *testing.T) {
	ctx := context.Background()
	h := &hub{leases: map[string]*hubLease{}}
	st := memory.New(nil)
	var (
		es    [2]*pigeon.Engine
		nodes [2]*failingNotifier
	)
	for i := range es {
		nodes[i] = &failingNotifier{hubNode: h.node()}
		o := transporttest.Options()
		o.Store, o.Cluster = nodeStore{Store: st, audit: memory.New(nil)}, nodes[i]
		e, err := pigeon.New(ctx, o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		es[i] = e
	}
	replied := make(chan error, 8)
	gateway, err := es[1].Connect(ctx, "gateway-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
		replied <- err
		return nil
	})
	require.NoError(t, err)
	checkout, err := es[0].Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)

	nodes[1].fail.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = checkout.Request(rctx, demo.Payment("o-1"))
	require.Error(t, err, "the reply never crossed")
	select {
	case err := <-replied:
		require.Equal(t, pigeon.CodeClusterUnconfirmed, pigeon.ErrorCode(err), "%v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the replier never replied")
	}

	nodes[1].fail.Store(false)
	rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := checkout.Request(rctx, demo.Payment("o-2"))
	require.NoError(t, err)
	require.Equal(t, demo.Gateway, reply.Source)
	require.NoError(t, <-replied)
}
