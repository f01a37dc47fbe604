package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

func chatMsg(room, text string) *pigeon.Message {
	data, _ := json.Marshal(map[string]string{"kind": "chat", "room": room, "text": text})
	return &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: data}
}

func jobMsg(n int) *pigeon.Message {
	return &pigeon.Message{Type: "job", Subject: "jobs.cluster", Intent: "run", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// caller is the Caller of a session's contract, usable on any node.
func caller(t *testing.T, token string, sess pigeon.Session) pigeon.Caller {
	return pigeon.Caller{Principal: principal(t, clusterOptions(), token), Region: "uk", ContractID: sess.Contract().ID()}
}

func requireCode(t *testing.T, err error, code pigeon.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, pigeon.ErrorCode(err), "%v", err)
}

// TestCluster runs three Pigeon engines on three NATS nodes (JetStream R3)
// and checks that the contract model holds across them.
func TestCluster(t *testing.T) {
	nc := startNATSCluster(t)
	prefix := freshPrefix()
	var nodes []*pigeonNode
	for i := range 3 {
		var mutate func(*pigeon.Options)
		if i == 2 { // node 3 keeps its rate limits to itself (RateLimitsShared)
			mutate = func(o *pigeon.Options) { o.NodeRateLimits = true }
		}
		nodes = append(nodes, nc.startPigeon(t, i, prefix, mutate))
	}
	n1, n2, n3 := nodes[0].e, nodes[1].e, nodes[2].e
	ctx := t.Context()

	t.Run("ContractOnEveryNode", func(t *testing.T) {
		sess, err := n1.Connect(ctx, "alice-token", []string{"chat.messages"})
		require.NoError(t, err)
		c := caller(t, "alice-token", sess)
		for _, e := range []*pigeon.Engine{n2, n3} {
			res, err := e.Publish(ctx, c, chatMsg("lobby", "hello"))
			require.NoError(t, err)
			require.Equal(t, pigeon.StatusAccepted, res.Status)
		}
		// The revocation returns once every node applied it: the very
		// next publish on another node is refused.
		require.NoError(t, n3.RevokeContract(ctx, c.Principal, c.ContractID))
		_, err = n1.Publish(ctx, c, chatMsg("lobby", "after"))
		requireCode(t, err, pigeon.CodeContractRevoked)
		_, err = n2.Publish(ctx, c, chatMsg("lobby", "after"))
		requireCode(t, err, pigeon.CodeContractRevoked)
	})

	t.Run("RoleRemoval", func(t *testing.T) {
		_, err := n1.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
		require.NoError(t, err)
		_, err = n1.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
		require.NoError(t, err)
		// Dave may publish to rooms.chat whatever happens to carol.
		_, err = n1.PutRole(ctx, pigeon.Role{Name: "poster", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
		require.NoError(t, err)
		_, err = n1.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"poster"}})
		require.NoError(t, err)
		// Carol's account reached every node when PutRole("poster")
		// returned: a barrier waits for every directory change this node
		// made before it.
		connect := func(e *pigeon.Engine, token string) pigeon.Session {
			sess, err := e.Connect(ctx, token, []string{"rooms.chat"})
			require.NoError(t, err)
			return sess
		}
		pub, sub, other := connect(n1, "carol-token"), connect(n3, "carol-token"), connect(n1, "dave-token")
		msg := &pigeon.Message{Type: "chat", Subject: "rooms.chat", Intent: "chat", Data: json.RawMessage(`{"room":"lobby"}`)}
		_, err = pub.Publish(ctx, msg)
		require.NoError(t, err)
		var mu sync.Mutex
		received := map[string]bool{}
		s, err := sub.Subscribe(ctx, "rooms.chat", func(_ context.Context, d *pigeon.Delivery) error {
			mu.Lock()
			received[d.Message.ID] = true
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)

		// The removal returns once every node applied it: the very next
		// publish on node 1 is refused, and nothing published after it
		// reaches the subscription on node 3.
		_, err = n2.RemoveAccountRole(ctx, carol, "member")
		require.NoError(t, err)
		_, err = pub.Publish(ctx, msg)
		requireCode(t, err, pigeon.CodeGrantRevoked)
		after, err := other.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "rooms.chat", Intent: "chat", Data: json.RawMessage(`{"room":"after"}`)})
		require.NoError(t, err)
		require.Equal(t, pigeon.StatusAccepted, after.Status)
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the subscription on node 3 did not stop")
		}
		requireCode(t, s.Err(), pigeon.CodeGrantRevoked)
		mu.Lock()
		defer mu.Unlock()
		require.False(t, received[after.Message.ID], "a message published after the removal reached the subscription")
	})

	t.Run("IdempotencyAcrossNodes", func(t *testing.T) {
		var results []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, e := range nodes {
			sess, err := e.e.Connect(ctx, "bob-token", []string{"chat.messages"})
			require.NoError(t, err)
			wg.Go(func() {
				m := chatMsg("lobby", "once")
				m.IdempotencyKey = "cluster-key-1"
				res, err := sess.Publish(ctx, m)
				require.NoError(t, err)
				mu.Lock()
				results = append(results, res.Status)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(results)
		require.Equal(t, []string{pigeon.StatusAccepted, pigeon.StatusDuplicate, pigeon.StatusDuplicate}, results)
	})

	t.Run("WorkQueueAcrossNodes", func(t *testing.T) {
		const total = 24
		var (
			mu       sync.Mutex
			inFlight = map[string]bool{}
			handled  = map[string]int{}
			overlap  atomic.Bool
			nacked   atomic.Bool
			nackedID string
		)
		for i, e := range []*pigeon.Engine{n1, n2, n3, n1} {
			sess, err := e.Connect(ctx, "crew-token", []string{"jobs.cluster"})
			require.NoError(t, err)
			_, err = sess.Subscribe(ctx, "jobs.cluster", func(_ context.Context, d *pigeon.Delivery) error {
				id := d.Message.ID
				mu.Lock()
				if inFlight[id] {
					overlap.Store(true)
				}
				inFlight[id] = true
				mu.Unlock()
				time.Sleep(time.Millisecond) // hold the lease a moment
				mu.Lock()
				defer mu.Unlock()
				delete(inFlight, id)
				// The first job handled fails once, on whichever node: which
				// consumers get jobs is up to the leases and the scheduler,
				// and a consumer picked beforehand may get none.
				if nacked.CompareAndSwap(false, true) {
					nackedID = id
					return fmt.Errorf("consumer %d fails once", i)
				}
				handled[id]++
				return nil
			})
			require.NoError(t, err)
		}
		boss, err := n2.Connect(ctx, "boss-token", []string{"jobs.cluster"})
		require.NoError(t, err)
		var ids []string
		for i := range total {
			res, err := boss.Publish(ctx, jobMsg(i))
			require.NoError(t, err)
			ids = append(ids, res.Message.ID)
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == total
		}, 30*time.Second, 20*time.Millisecond, "every job handled")
		mu.Lock()
		defer mu.Unlock()
		require.False(t, overlap.Load(), "a job was handled by two consumers at once")
		require.True(t, nacked.Load())
		require.Equal(t, 1, handled[nackedID], "the nacked job was redelivered")
		for _, id := range ids {
			require.Equal(t, 1, handled[id], "job %s acked once", id)
		}
	})

	t.Run("SelectorAcrossNodes", func(t *testing.T) {
		alice3, err := n3.Connect(ctx, "alice-token", []string{"chat.messages"})
		require.NoError(t, err)
		got := make(chan *pigeon.Message, 100)
		_, err = alice3.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
			got <- d.Message
			return nil
		}, pigeon.WithSelector("/room=ops"))
		require.NoError(t, err)
		var want []string
		// The last message, in the selected room, marks the end: a message of
		// the other room let through would come before it.
		for i, e := range []*pigeon.Engine{n1, n2, n1, n2, n2, n1, n1, n2, n1} {
			sess, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
			require.NoError(t, err)
			room := []string{"ops", "lobby"}[i%2]
			res, err := sess.Publish(ctx, chatMsg(room, fmt.Sprint(i)))
			require.NoError(t, err)
			if room == "ops" {
				want = append(want, res.Message.ID)
			}
		}
		var seen []string
		var last uint64
		for len(seen) < len(want) {
			select {
			case m := <-got:
				require.Greater(t, m.Sequence, last, "in order")
				last = m.Sequence
				seen = append(seen, m.ID)
			case <-time.After(30 * time.Second):
				t.Fatalf("received %d of %d", len(seen), len(want))
			}
		}
		require.Equal(t, want, seen, "only the selected room's messages, each once")
		select {
		case m := <-got:
			t.Fatalf("an extra message %s", m.ID)
		default:
		}
	})

	t.Run("RequestReplyAcrossNodes", func(t *testing.T) {
		checkout, err := n1.Connect(ctx, "checkout-token", []string{"payments.authorize"})
		require.NoError(t, err)
		gateway, err := n3.Connect(ctx, "gateway-token", []string{"payments.authorize"})
		require.NoError(t, err)
		_, err = gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
			_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
			return err
		})
		require.NoError(t, err)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		reply, err := checkout.Request(rctx, demo.Payment("o-1"))
		require.NoError(t, err)
		require.JSONEq(t, `{"approved":true}`, string(reply.Data))
		require.Equal(t, demo.Gateway, reply.Source)
	})

	// A rate limit is shared among the live nodes: nodes 1 and 2 each
	// admit a third of rated.chat's burst for one principal, so that a
	// principal spread over the cluster gets the limit in all, not three
	// times it. Node 3 runs with NodeRateLimits and admits the whole burst.
	t.Run("RateLimitsShared", func(t *testing.T) {
		for _, p := range nodes {
			require.Eventually(t, func() bool { return p.cl.LiveNodes() == 3 }, 30*time.Second, 20*time.Millisecond,
				"every node counts three live nodes")
		}
		sess, err := n1.Connect(ctx, "alice-token", []string{"rated.chat"})
		require.NoError(t, err)
		c := caller(t, "alice-token", sess)
		admitted := func(e *pigeon.Engine) int {
			n := 0
			for ; n <= 2*ratedBurst; n++ {
				_, err := e.Publish(ctx, c, &pigeon.Message{Type: "chat", Subject: "rated.chat", Intent: "chat", Data: json.RawMessage(`{"n":1}`)})
				if err != nil {
					requireCode(t, err, pigeon.CodeRateLimited)
					return n
				}
			}
			return n
		}
		require.Equal(t, ratedBurst/3, admitted(n1))
		require.Equal(t, ratedBurst/3, admitted(n2))
		require.Equal(t, ratedBurst, admitted(n3))
	})

	// Every node's audit chain verifies, offline, after all of the above.
	for _, p := range nodes {
		p.stop()
	}
	conn := connect(t, nc.nodes[0].url())
	reports, err := VerifyAudit(ctx, conn, prefix)
	require.NoError(t, err)
	require.Len(t, reports, 3)
	for _, r := range reports {
		require.NoError(t, r.Err, "chain of %s", r.Node)
		require.NotZero(t, r.Records, "chain of %s", r.Node)
	}
}
