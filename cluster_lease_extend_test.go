package pigeon_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// extendingNode is a hub node that is a pigeon.LeaseExtender, counting
// the lease writes (one per sequence extended) and the calls.
type extendingNode struct {
	*hubNode
	writes, calls atomic.Int64
}

var _ pigeon.LeaseExtender = (*extendingNode)(nil)

func (n *extendingNode) Extend(_ context.Context, key store.GroupKey, seqs []uint64, deadline time.Time) ([]uint64, error) {
	n.calls.Add(1)
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	var lost []uint64
	for _, seq := range seqs {
		l := n.h.leases[leaseKey(key, seq)]
		if l == nil || l.done || l.node != n.hubNode {
			lost = append(lost, seq)
			continue
		}
		l.until = deadline
		n.writes.Add(1)
	}
	return lost, nil
}

// extendAck is the ack wait of jobs.run in these tests.
const extendAck = 100 * time.Millisecond

// extendOptions are dupOptions with jobs.run's ack wait extendAck.
func extendOptions() *pigeon.Options {
	o := dupOptions()
	for j := range o.Catalog.Subjects {
		o.Catalog.Subjects[j].Delivery.AckWaitMs = extendAck.Milliseconds()
	}
	return o
}

// extendingNodes starts two engines on one store, joined by a hub whose
// nodes extend leases, jobs.run's ack wait extendAck.
func extendingNodes(t *testing.T, logs *testlog.Buffer) (*hub, [2]*pigeon.Engine, [2]*extendingNode) {
	h := &hub{leases: map[string]*hubLease{}}
	st := memory.New(nil)
	var es [2]*pigeon.Engine
	var ns [2]*extendingNode
	for i := range es {
		o := extendOptions()
		ns[i] = &extendingNode{hubNode: h.node()}
		o.Store, o.Cluster = viewOf(st), ns[i]
		if logs != nil {
			o.Logger = logs.Logger()
		}
		es[i] = startEngine(t, o)
	}
	return h, es, ns
}

// holdingSubscription subscribes consumer to subject with a handler that
// logs its runs in log and holds each until free is called. When the test
// ends free is called, before the unsubscribe, which waits for the
// handlers.
func holdingSubscription(t *testing.T, consumer pigeon.Session, subject string, opts ...pigeon.SubscribeOption) (log *runLog, free func()) {
	t.Helper()
	log = newRunLog()
	release := make(chan struct{})
	var once sync.Once
	free = func() { once.Do(func() { close(release) }) }
	sub, err := consumer.Subscribe(context.Background(), subject, log.holding(release), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	t.Cleanup(free) // before the unsubscribe, which waits for the handlers
	return log, free
}

// With a LeaseExtender, the cluster leases of messages whose handlers run
// on node A for ten ack waits are kept: node B's consumer of the same
// group gets none of them meanwhile. The cost is bounded: each lease is
// written at most twice per ack wait, in a handful of Extend calls per
// ack wait for all of them together.
func TestClusterLeasesAreExtendedWhileHandlersRun(t *testing.T) {
	const n = 64
	const run = 10 * extendAck
	_, es, ns := extendingNodes(t, nil)
	c := dupCases[0]
	pub := dupConnect(t, es[1], c.pub, c.subject)
	log, free := holdingSubscription(t, dupConnect(t, es[0], c.sub, c.subject), c.subject, pigeon.WithMaxInFlight(n))
	ids := publishN(t, pub, c, 0, n)
	for _, id := range ids {
		require.Eventually(t, func() bool { _, running := log.count(id); return running == 1 }, 10*time.Second, time.Millisecond)
	}
	var onB atomic.Int64
	subB, err := dupConnect(t, es[1], c.sub, c.subject).Subscribe(context.Background(), c.subject, func(context.Context, *pigeon.Delivery) error {
		onB.Add(1)
		return nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = subB.Unsubscribe(context.Background()) })
	w0, c0, t0 := ns[0].writes.Load(), ns[0].calls.Load(), time.Now()
	time.Sleep(run)
	writes, calls, took := ns[0].writes.Load()-w0, ns[0].calls.Load()-c0, time.Since(t0)
	free()
	require.Zero(t, onB.Load(), "node B ran a message whose handler still ran on node A")
	waits := float64(took) / float64(extendAck)
	perLease := float64(writes) / n / waits
	t.Logf("%d busy leases over %.1f ack waits: %d lease writes (%.2f per lease per ack wait) in %d Extend calls", n, waits, writes, perLease, calls)
	require.LessOrEqual(t, perLease, 2.0, "more than two writes per busy lease per ack wait")
	require.GreaterOrEqual(t, perLease, 0.9, "the leases were not kept")
	require.LessOrEqual(t, float64(calls)/waits, 6.0, "the leases of one subscription were not extended together")
	for _, id := range ids {
		require.Eventually(t, func() bool { r, running := log.count(id); return r == 1 && running == 0 }, 10*time.Second, time.Millisecond)
	}
	time.Sleep(3 * extendAck)
	require.Zero(t, onB.Load(), "node B ran an acknowledged message")
	require.Empty(t, log.overlaps())
}

// A lease that another node took meanwhile (after a partition, say) is
// reported lost by Extend: the engine logs it and extends it no more;
// the handler's acknowledgement settles the message as before.
func TestALostClusterLeaseIsLoggedAndNoLongerExtended(t *testing.T) {
	var logs testlog.Buffer
	h, es, ns := extendingNodes(t, &logs)
	c := dupCases[0]
	pub := dupConnect(t, es[1], c.pub, c.subject)
	log, free := holdingSubscription(t, dupConnect(t, es[0], c.sub, c.subject), c.subject)
	id := publishN(t, pub, c, 0, 1)[0]
	waitStarted(t, log, id)
	// Another node takes the lease over, as after a partition.
	h.mu.Lock()
	for _, l := range h.leases {
		l.node = ns[1].hubNode
		l.until = time.Now().Add(time.Hour)
	}
	h.mu.Unlock()
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "cluster leases were lost")
	}, 10*time.Second, time.Millisecond)
	calls := ns[0].calls.Load()
	time.Sleep(3 * extendAck)
	require.Equal(t, calls, ns[0].calls.Load(), "a lost lease was extended again")
	free()
	require.Eventually(t, func() bool { r, running := log.count(id); return r == 1 && running == 0 }, 10*time.Second, time.Millisecond)
}
