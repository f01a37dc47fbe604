package ws_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/store"
	"pigeon/transport/ws"
)

// losingCluster is a Cluster of one node whose leases are this node's
// until lose: from then on Extend reports every lease it is asked about
// lost, and Acquire finds each held by another node, as after that node
// took them once they ran out.
type losingCluster struct {
	mu       sync.Mutex
	attempts map[uint64]int
	lost     bool
	done     bool // a Release asked to mark a lease done
}

var _ pigeon.LeaseExtender = (*losingCluster)(nil)

func (c *losingCluster) Notify(pigeon.ClusterChange) {}

func (c *losingCluster) Watch(ctx context.Context, _ func(pigeon.ClusterChange)) error {
	<-ctx.Done()
	return ctx.Err()
}

func (c *losingCluster) Acquire(_ context.Context, _ store.GroupKey, seq uint64, deadline time.Time) (pigeon.LeaseState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return pigeon.LeaseState{Until: deadline.Add(time.Hour)}, nil
	}
	c.attempts[seq]++
	return pigeon.LeaseState{Acquired: true, Attempt: c.attempts[seq]}, nil
}

// Release records a done release, asked for; once the leases are lost it
// refuses one ACK_NOT_ALLOWED, as a Cluster does for a lease another
// node took.
func (c *losingCluster) Release(_ context.Context, _ store.GroupKey, seq uint64, _ int, done bool, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = c.done || done
	if done && c.lost {
		return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is another node's", seq)
	}
	return nil
}

func (c *losingCluster) Extend(_ context.Context, _ store.GroupKey, seqs []uint64, _ time.Time) ([]uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return seqs, nil
	}
	return nil, nil
}

func (c *losingCluster) lose() {
	c.mu.Lock()
	c.lost = true
	c.mu.Unlock()
}

func (c *losingCluster) settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// When the cluster reports lost the lease of a delivery a WebSocket
// subscriber holds unanswered (it ran out while the node was cut off or
// stalled, and another node may run the message), the server settles the
// delivery as refused (nack.denied, ACK_NOT_ALLOWED) and takes it out of
// what waits for an answer: the client's later ack is refused
// ACK_NOT_ALLOWED, or named in notPending, and settles nothing in the
// cluster. Before, the server took the ack, and the engine marked the
// message done under the other node's lease.
func TestALostClusterLeaseRefusesTheClientsLaterAnswer(t *testing.T) {
	cl := &losingCluster{attempts: map[uint64]int{}}
	clk := testclock.New(time.Now())
	v := newEnv(t, nil, func(o *pigeon.Options) {
		o.Cluster, o.Now = cl, clk.Now
		// The server's own ack wait reads the system clock: a minute
		// does not pass. The engine's runs on clk.
		for i := range o.Catalog.Subjects {
			if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
				p.Delivery.AckWaitMs = time.Minute.Milliseconds()
			}
		}
	})
	_, crew, sub, d := pushedJob(t, v)
	seq := strconv.FormatUint(d.Message.Sequence, 10)

	cl.lose()
	clk.Advance(time.Minute) // the lease's extension is due: the cluster reports it lost
	eventually(t, func() bool {
		recs, err := v.e.Audit(context.Background(), 0, 0)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Type == string(pigeon.EventNackDenied) && r.MessageID == "job-1" && r.Code == string(pigeon.CodeAckNotAllowed) {
				return true
			}
		}
		return false
	}, "the delivery whose lease was lost was not settled as refused")

	crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-1","sequence":`+seq, pigeon.CodeAckNotAllowed)
	a := crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":["job-1"],"sequences":[`+seq+`]`, ws.OpOK)
	require.Equal(t, []string{"job-1"}, a.NotPending)
	require.False(t, cl.settled(), "an answer after the loss was taken to the cluster as settling the message")
}
