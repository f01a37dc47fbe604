package jetstream

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/ws"
)

// retryable says whether a client should retry a publish that failed with
// err, on the same node (true, false) or on another (true, true).
func retryable(err error) (retry, elsewhere bool) {
	switch pigeon.ErrorCode(err) {
	case pigeon.CodeStoreNoQuorum, pigeon.CodeStoreUnavailable, pigeon.CodeRequestTimeout:
		return true, false
	case pigeon.CodeShutdown, pigeon.CodeSessionClosed:
		return true, true
	}
	return false, false
}

// TestClusterFailover kills -9 one NATS node and one Pigeon node (both
// child processes) under publishing load: every publish answered
// "accepted" is stored exactly once and the dead node's client goes on
// through another. Then the cluster loses its quorum: publishes fail with
// STORE_NO_QUORUM and succeed again once it is back.
func TestClusterFailover(t *testing.T) {
	nc := startNATSCluster(t)
	prefix := freshPrefix()
	ctx := t.Context()
	// Pigeon node 2 is a child process its client reaches over WebSocket;
	// nodes 1 and 3 run in this process.
	nodes := []*pigeonNode{nc.startPigeon(t, 0, prefix, nil), nil, nc.startPigeon(t, 2, prefix, nil)}
	child := nc.startPigeonChild(t, 1, prefix, "p2")
	dial := func(node int) (pigeon.Session, error) {
		if node == 1 {
			return ws.Dialer{URL: child.wsURL()}.Dial(ctx, "bob-token", []string{"chat.messages"})
		}
		return nodes[node].e.Connect(ctx, "bob-token", []string{"chat.messages"})
	}
	var dead atomic.Int32 // 1 + index of the stopped Pigeon node
	const perPublisher = 40
	var (
		mu       sync.Mutex
		accepted = map[string]string{} // idempotency key -> message id
		answered atomic.Int32
		moved    atomic.Bool
	)
	publisher := func(p int) {
		node := p
		sess, err := dial(node)
		require.NoError(t, err)
		for k := 0; k < perPublisher; {
			m := chatMsg("load", fmt.Sprintf("p%d-%d", p, k))
			m.IdempotencyKey = fmt.Sprintf("p%d-%d", p, k)
			res, err := sess.Publish(ctx, m)
			if err != nil {
				retry, elsewhere := retryable(err)
				if int(dead.Load()) == node+1 {
					retry, elsewhere = true, true // whatever the broken connection said
				}
				require.True(t, retry, "publisher %d: %v", p, err)
				if elsewhere {
					// The node is gone: reconnect to the next live one.
					for node = (node + 1) % 3; int(dead.Load()) == node+1; node = (node + 1) % 3 {
					}
					moved.Store(true)
					for {
						sess, err = dial(node)
						if err == nil {
							break
						}
						retry, _ := retryable(err)
						require.True(t, retry, "reconnecting: %v", err)
						time.Sleep(50 * time.Millisecond)
					}
				} else {
					time.Sleep(50 * time.Millisecond)
				}
				continue
			}
			mu.Lock()
			if prev, ok := accepted[m.IdempotencyKey]; ok {
				require.Equal(t, prev, res.Message.ID)
			}
			accepted[m.IdempotencyKey] = res.Message.ID
			mu.Unlock()
			answered.Add(1)
			k++
		}
	}
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Go(func() { publisher(p) })
	}
	require.Eventually(t, func() bool { return answered.Load() >= 20 }, 30*time.Second, 10*time.Millisecond)
	nc.nodes[2].kill() // NATS node 3, kill -9
	dead.Store(2)
	child.kill() // Pigeon node 2, kill -9
	wg.Wait()
	require.True(t, moved.Load(), "the dead node's client moved to another node")
	require.Len(t, accepted, 3*perPublisher)

	// Every accepted publish is stored exactly once.
	msgs, err := nodes[0].s.Read(ctx, "chat.messages", 0, 0)
	require.NoError(t, err)
	stored := map[string]int{}
	byKey := map[string]string{}
	for _, m := range msgs {
		stored[m.ID]++
		if m.IdemKey != "" {
			byKey[m.IdemKey] = m.ID
		}
	}
	for key, id := range accepted {
		require.Equal(t, 1, stored[id], "accepted message %s (%s) stored once", id, key)
	}
	require.Len(t, stored, len(msgs), "no message id stored twice")

	t.Run("LostQuorum", func(t *testing.T) {
		var sess pigeon.Session
		require.Eventually(t, func() bool {
			// The audit log may still be resuming from the failover.
			sess, err = nodes[0].e.Connect(ctx, "bob-token", []string{"chat.messages"})
			if err != nil {
				retry, _ := retryable(err)
				require.True(t, retry, "%v", err)
			}
			return err == nil
		}, 30*time.Second, 50*time.Millisecond)
		nc.nodes[1].kill() // one NATS node of three left
		_, err = sess.Publish(ctx, chatMsg("load", "no quorum"))
		requireCode(t, err, pigeon.CodeStoreNoQuorum)
		nc.start(t, nc.nodes[1])
		nc.start(t, nc.nodes[2])
		require.Eventually(t, func() bool {
			_, err := sess.Publish(ctx, chatMsg("load", "quorum back"))
			if err != nil {
				retry, _ := retryable(err)
				require.True(t, retry, "%v", err)
			}
			return err == nil
		}, 60*time.Second, 100*time.Millisecond)
	})

	// The audit chains verify, the dead node's included.
	nodes[0].stop()
	nodes[2].stop()
	conn := connect(t, nc.nodes[0].url())
	var reports []ChainReport
	require.Eventually(t, func() bool {
		// The restarted servers may still be electing stream leaders: a
		// chain that cannot be read yet is read again; one that reads but
		// does not verify fails the test.
		reports, err = VerifyAudit(ctx, conn, prefix)
		if err != nil || len(reports) != 3 {
			return false
		}
		for _, r := range reports {
			var ce *store.ChainError
			require.False(t, errors.As(r.Err, &ce), "chain of %s: %v", r.Node, r.Err)
			if r.Err != nil {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond, "%v", reports)
}
