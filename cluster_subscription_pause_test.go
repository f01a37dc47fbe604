package pigeon_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pigeon/store"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// directoryCounting is a vouching node that counts the directory changes
// it has applied: a Cluster vouches again only once the node caught up.
type directoryCounting struct {
	*vouchingNode
	applied atomic.Int64
}

func (n *directoryCounting) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	return n.vouchingNode.Watch(ctx, countingApplied(fn, pigeon.ChangeDirectory, &n.applied))
}

// texts records the texts of the chat messages a handler was handed.
type texts struct {
	mu  sync.Mutex
	got []string
}

func (r *texts) handler(_ context.Context, d *pigeon.Delivery) error {
	var m struct{ Text string }
	if err := json.Unmarshal(d.Message.Data, &m); err != nil {
		return err
	}
	r.mu.Lock()
	r.got = append(r.got, m.Text)
	r.mu.Unlock()
	return nil
}

func (r *texts) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// distinct is list without repeats, in the order of first delivery.
func (r *texts) distinct() []string {
	var out []string
	for _, s := range r.list() {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// pauseCluster is two nodes on one memory store: a, and b, whose
// directory reads and whose vouching (pigeon.ClusterCurrent) the test
// controls.
type pauseCluster struct {
	*nodePair
	bNode  *directoryCounting
	bReads *directoryReads
}

func newPauseCluster(t *testing.T) *pauseCluster {
	t.Helper()
	c := &pauseCluster{}
	c.nodePair = startNodePair(t, accessFixtureOptions, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
		c.bNode = &directoryCounting{vouchingNode: &vouchingNode{hubNode: h.node()}}
		c.bNode.beat()
		t.Cleanup(func() { c.bNode.cut(false) })
		c.bReads = &directoryReads{nodeStore: view}
		return c.bReads, c.bNode
	})
	return c
}

// TestClusterSubscriptionPausesWhileDirectoryBehind: while a node's
// access directory is behind (a reload of another node's change fails,
// or the Cluster no longer vouches that the node heard every change, as
// when the stream of node records elects a new leader), every
// authorization there is refused STORE_UNAVAILABLE. Before, its running
// subscriptions stopped STORE_UNAVAILABLE as well: every client had to
// subscribe again after every such blip. Now a subscription delivers
// nothing while the directory is behind, the messages other nodes
// publish meanwhile included, and does not end; once the directory has
// caught up, it judges its contract on it: one whose grant another node
// revoked meanwhile ends GRANT_REVOKED, having been handed nothing
// since, and the others deliver what was published meanwhile, in order,
// nothing lost: a pub/sub subscription's messages and a work-queue
// consumer's jobs alike.
func TestClusterSubscriptionPausesWhileDirectoryBehind(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fallBehind makes b's directory behind and revokes the grant on a
		// meanwhile; catchUp lets b catch up.
		fallBehind func(t *testing.T, c *pauseCluster, revoke func())
		catchUp    func(t *testing.T, c *pauseCluster)
	}{
		{"a reload fails", func(t *testing.T, c *pauseCluster, revoke func()) {
			c.bReads.set(true, false)
			revoke()
			c.announce()
			c.requireLogged(t, "access directory is behind")
		}, func(_ *testing.T, c *pauseCluster) {
			c.bReads.set(false, false)
		}},
		{"its vouching runs out", func(t *testing.T, c *pauseCluster, revoke func()) {
			c.bNode.cut(false)
			revoke() // never announced while b is cut off
			c.requireLogged(t, "can no longer be sure it has heard every change")
		}, func(t *testing.T, c *pauseCluster) {
			applied := c.bNode.applied.Load()
			c.announce()
			require.Eventually(t, func() bool { return c.bNode.applied.Load() > applied }, 10*time.Second, 5*time.Millisecond)
			c.bNode.beat()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPauseCluster(t)
			_, err := c.a.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{
				{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}},
			}})
			require.NoError(t, err)
			for _, id := range []string{carol, dave} {
				_, err = c.a.CreateAccount(ctx, pigeon.Account{ID: id, Roles: []string{"member"}})
				require.NoError(t, err)
			}
			g, err := c.a.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
			require.NoError(t, err)
			c.announce()

			publisher := connectEventually(t, c.a, "dave-token")
			defer publisher.Close(ctx)
			// On b: dave, whom nothing is taken from, and carol on the
			// grant a revokes while b is behind.
			var kept, revoked texts
			keptSess := connectEventually(t, c.b, "dave-token")
			defer keptSess.Close(ctx)
			keep, err := keptSess.Subscribe(ctx, "rooms.chat", kept.handler)
			require.NoError(t, err)
			defer func() { _ = keep.Unsubscribe(ctx) }()
			lostSess := connectEventually(t, c.b, g.Token)
			defer lostSess.Close(ctx)
			lost, err := lostSess.Subscribe(ctx, "rooms.chat", revoked.handler)
			require.NoError(t, err)
			defer func() { _ = lost.Unsubscribe(ctx) }()
			// A work-queue consumer on b, jobs published on a.
			boss := connectEventually(t, c.a, "boss-token", "jobs.run")
			defer boss.Close(ctx)
			var jobs texts
			crewSess := connectEventually(t, c.b, "crew-token", "jobs.run")
			defer crewSess.Close(ctx)
			crew, err := crewSess.Subscribe(ctx, "jobs.run", jobs.handler)
			require.NoError(t, err)
			defer func() { _ = crew.Unsubscribe(ctx) }()
			job := func(text string) *pigeon.Message {
				return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"text":"` + text + `"}`)}
			}

			_, err = publisher.Publish(ctx, chatIn("lobby", "before"))
			require.NoError(t, err)
			_, err = boss.Publish(ctx, job("before"))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				return len(kept.list()) == 1 && len(revoked.list()) == 1 && len(jobs.list()) == 1
			}, 10*time.Second, 5*time.Millisecond)

			tc.fallBehind(t, c, func() { require.NoError(t, c.a.RevokeGrant(ctx, g.JTI)) })
			_, err = c.b.Connect(ctx, "dave-token", []string{"rooms.chat"})
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			meanwhile := []string{"meanwhile 1", "meanwhile 2", "meanwhile 3"}
			for _, text := range meanwhile {
				_, err = publisher.Publish(ctx, chatIn("lobby", text))
				require.NoError(t, err)
				_, err = boss.Publish(ctx, job(text))
				require.NoError(t, err)
			}
			require.Never(t, func() bool {
				return len(kept.list()) > 1 || len(revoked.list()) > 1 || len(jobs.distinct()) > 1
			}, 500*time.Millisecond, 10*time.Millisecond, "nothing is delivered on b while its directory is behind")
			for _, sub := range []pigeon.Subscription{keep, lost, crew} {
				select {
				case <-sub.Done():
					require.Failf(t, "a subscription ended while the directory was behind", "%v", sub.Err())
				default:
				}
			}

			tc.catchUp(t, c)
			connectEventually(t, c.b, "dave-token").Close(ctx)
			require.Eventually(t, func() bool { return len(kept.list()) == 1+len(meanwhile) }, 10*time.Second, 5*time.Millisecond,
				"what was published meanwhile is delivered once b caught up: %v", kept.list())
			require.Equal(t, append([]string{"before"}, meanwhile...), kept.list())
			require.NoError(t, keep.Err())
			// A work queue delivers at least once: an acknowledgement
			// settled while b was behind is not trusted, and its job comes
			// again.
			require.Eventually(t, func() bool { return len(jobs.distinct()) == 1+len(meanwhile) }, 10*time.Second, 5*time.Millisecond,
				"the jobs published meanwhile are handed to b's consumer once it caught up: %v", jobs.list())
			require.ElementsMatch(t, append([]string{"before"}, meanwhile...), jobs.distinct())
			require.NoError(t, crew.Err())
			select {
			case <-lost.Done():
			case <-time.After(10 * time.Second):
				require.Fail(t, "the subscription whose grant was revoked goes on")
			}
			requireCode(t, lost.Err(), pigeon.CodeGrantRevoked)
			require.Equal(t, []string{"before"}, revoked.list(), "nothing is delivered on the revoked grant")

			_, err = publisher.Publish(ctx, chatIn("lobby", "after"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(kept.list()) == 2+len(meanwhile) }, 10*time.Second, 5*time.Millisecond)
		})
	}
}
