package pigeon_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// contractReads is a node's view of the shared store whose contract reads
// the test controls: they fail, panic or hang, as in a store that is
// unreachable from this node, or one read is held back with what it read.
type contractReads struct {
	nodeStore
	readFaults
	held  map[string]chan struct{} // guarded by readFaults.mu
	reads atomic.Int64             // reads of a contract that were answered
}

func (s *contractReads) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	s.mu.Lock()
	held := s.held[id]
	delete(s.held, id)
	s.mu.Unlock()
	if held != nil {
		// Read now, answered once released: a read that began before a
		// change and ends after it.
		rec, err := s.nodeStore.GetContract(ctx, id)
		s.reads.Add(1)
		<-held
		return rec, err
	}
	if err := s.fault(ctx, "reading contract "+id); err != nil {
		return store.ContractRecord{}, err
	}
	defer s.reads.Add(1)
	return s.nodeStore.GetContract(ctx, id)
}

// holdNext makes the next read of contract id read the store at once and
// answer only once the returned func is called.
func (s *contractReads) holdNext(id string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	s.held[id] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// changeCounting is a hub node that counts the contract changes its
// engine has applied.
type changeCounting struct {
	*hubNode
	applied atomic.Int64
}

func (n *changeCounting) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	return n.hubNode.Watch(ctx, countingApplied(fn, pigeon.ChangeContract, &n.applied))
}

// countingApplied is fn, counting in applied the changes of kind it has
// applied.
func countingApplied(fn func(pigeon.ClusterChange), kind pigeon.ClusterChangeKind, applied *atomic.Int64) func(pigeon.ClusterChange) {
	return func(c pigeon.ClusterChange) {
		fn(c)
		if c.Kind == kind {
			applied.Add(1)
		}
	}
}

// doubtCluster is two nodes on one memory store, joined by a Cluster
// that tells of a contract's change without saying what it is (no
// Revoked): a, whose reads succeed, and b, whose contract reads the test
// controls and whose log it reads.
type doubtCluster struct {
	*nodePair
	bNode  *changeCounting
	bReads *contractReads
}

func newDoubtCluster(t *testing.T) *doubtCluster {
	t.Helper()
	c := &doubtCluster{}
	c.nodePair = startNodePair(t, transporttest.Options, func(h *hub, view nodeStore) (store.Store, pigeon.Cluster) {
		c.bNode = &changeCounting{hubNode: h.node()}
		c.bReads = &contractReads{nodeStore: view}
		return c.bReads, c.bNode
	})
	return c
}

// tell tells b that a changed contract id, without saying how, as a
// Cluster that does not read the change does.
func (c *doubtCluster) tell(id string) {
	c.h.broadcast(c.aNode, pigeon.ClusterChange{Kind: pigeon.ChangeContract, ContractID: id})
}

// principal authenticates credential on a, where the other node's
// changes are made.
func (c *doubtCluster) principal(t *testing.T, credential string) *pigeon.Principal {
	t.Helper()
	p, err := c.a.Authenticate(ctx, credential)
	require.NoError(t, err)
	return p
}

func chatText(text string) *pigeon.Message {
	data, _ := json.Marshal(map[string]string{"kind": "chat", "room": "lobby", "text": text})
	return &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: data}
}

// TestClusterContractInDoubtFailsClosed: another node changes a contract
// (revokes it, or renews it) and its Cluster tells this node without
// saying what the change is (ClusterChange.Revoked false, as the generic
// Cluster interface allows), while this node cannot read the contract
// again (the store unreachable from it, a read that panics, one that
// hangs). Before, this node read it again until a read succeeded and
// meanwhile went on honouring what it held: the contract another node
// revoked still published, received, renewed and delivered here for as
// long as the store could not be read. Now the contract is in doubt from
// the first failed read (or a second into one that hangs): its every
// check here is refused STORE_UNAVAILABLE and its running subscription
// delivers nothing and does not end, until a read succeeds; then a
// revoked contract ends its subscription CONTRACT_REVOKED, having been
// handed nothing since, and one that was not revoked goes on, what was
// published meanwhile delivered in order. Another contract of the same
// node works throughout, and the node's watch goes on with the changes
// after this one (before, it waited for the read, and they with it).
func TestClusterContractInDoubtFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		revoked bool
		// cut makes b's contract reads fail; it returns what restores them.
		cut func(c *doubtCluster) (restore func())
	}{
		{"a read fails, the change revoked it", true, func(c *doubtCluster) func() {
			c.bReads.set(true, false)
			return func() { c.bReads.set(false, false) }
		}},
		{"a read panics, the change revoked it", true, func(c *doubtCluster) func() {
			c.bReads.set(true, true)
			return func() { c.bReads.set(false, false) }
		}},
		{"a read hangs, the change revoked it", true, func(c *doubtCluster) func() {
			return c.bReads.holdReads()
		}},
		{"a read fails, the change renewed it", false, func(c *doubtCluster) func() {
			c.bReads.set(true, false)
			return func() { c.bReads.set(false, false) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newDoubtCluster(t)
			publisher, err := c.a.Connect(ctx, "bob-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer publisher.Close(ctx)
			// On b: alice, whose contract a changes, and bob, whose
			// contract nothing touches.
			var doubted, kept texts
			aliceSess, err := c.b.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer aliceSess.Close(ctx)
			id := aliceSess.Contract().ID()
			doubtedSub, err := aliceSess.Subscribe(ctx, "chat.messages", doubted.handler)
			require.NoError(t, err)
			bobSess, err := c.b.Connect(ctx, "bob-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer bobSess.Close(ctx)
			keptSub, err := bobSess.Subscribe(ctx, "chat.messages", kept.handler)
			require.NoError(t, err)
			defer func() { _ = keptSub.Unsubscribe(ctx) }()

			_, err = publisher.Publish(ctx, chatText("before"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(doubted.list()) == 1 && len(kept.list()) == 1 }, 10*time.Second, 5*time.Millisecond)

			restore := tc.cut(c)
			defer restore()
			alice := c.principal(t, "alice-token")
			if tc.revoked {
				require.NoError(t, c.a.RevokeContract(ctx, alice, id))
			} else {
				_, err = c.a.RenewContract(ctx, alice, id, time.Hour)
				require.NoError(t, err)
			}
			c.tell(id)

			require.Eventually(t, func() bool {
				_, err := aliceSess.Receive(ctx, "chat.messages", 1)
				return pigeon.ErrorCode(err) == pigeon.CodeStoreUnavailable
			}, 10*time.Second, 5*time.Millisecond, "b goes on honouring the contract another node changed while it cannot read it: %s", c.bLog.String())
			_, err = aliceSess.Publish(ctx, chatText("from the doubted contract"))
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			_, err = c.b.RenewContract(ctx, callerOf(aliceSess).Principal, id, time.Hour)
			requireCode(t, err, pigeon.CodeStoreUnavailable)
			c.requireLogged(t, "cannot read it again")
			require.Eventually(t, func() bool { return c.bNode.applied.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
				"b's watch goes on with the changes after this one while the contract cannot be read")

			meanwhile := []string{"meanwhile 1", "meanwhile 2", "meanwhile 3"}
			for _, text := range meanwhile {
				_, err = publisher.Publish(ctx, chatText(text))
				require.NoError(t, err)
			}
			_, err = bobSess.Publish(ctx, chatText("from the kept contract"))
			require.NoError(t, err, "a contract nobody changed works on b meanwhile")
			require.Eventually(t, func() bool { return len(kept.list()) == 2+len(meanwhile) }, 10*time.Second, 5*time.Millisecond,
				"a subscription whose contract nobody changed is delivered to on b meanwhile: %v", kept.list())
			require.Never(t, func() bool { return len(doubted.list()) > 1 }, 300*time.Millisecond, 10*time.Millisecond,
				"nothing is delivered on b under a contract in doubt")
			require.False(t, isDone(doubtedSub), "a subscription pauses while its contract is in doubt; it ended: %v", doubtedSub.Err())

			restore()
			if tc.revoked {
				requireStopped(t, doubtedSub, pigeon.CodeContractRevoked)
				require.Equal(t, []string{"before"}, doubted.list(), "nothing is delivered under the revoked contract")
				_, err = aliceSess.Publish(ctx, chatText("after"))
				requireCode(t, err, pigeon.CodeContractRevoked)
			} else {
				want := append([]string{"before"}, meanwhile...)
				want = append(want, "from the kept contract")
				require.Eventually(t, func() bool { return len(doubted.list()) == len(want) }, 10*time.Second, 5*time.Millisecond,
					"what was published meanwhile is delivered once the contract is read: %v", doubted.list())
				require.Equal(t, want, doubted.list())
				require.NoError(t, doubtedSub.Err())
				_, err = aliceSess.Publish(ctx, chatText("after"))
				require.NoError(t, err)
				_, err = c.b.RenewContract(ctx, callerOf(aliceSess).Principal, id, time.Hour)
				require.NoError(t, err)
				require.NoError(t, doubtedSub.Unsubscribe(ctx))
			}
			c.requireLogged(t, "was read again")
			require.NoError(t, keptSub.Err())
		})
	}
}

// TestClusterContractChangedWhileLoading: a node loads a contract it has
// not seen (its first use there) while another node revokes it, and the
// load's read of the store comes before the revocation. Before, the
// change of a contract not yet loaded was passed over (it is read when
// first used), the load then cached the contract as it read it, and the
// node honoured the revoked contract from then on. Now the change is read
// whether or not the contract is loaded, and the load caches it revoked.
func TestClusterContractChangedWhileLoading(t *testing.T) {
	c := newDoubtCluster(t)
	alice := c.principal(t, "alice-token")
	k, err := c.a.Negotiate(ctx, alice, "", []string{"chat.messages"}, time.Hour)
	require.NoError(t, err)
	onB, err := c.b.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	caller := pigeon.Caller{Principal: onB, ContractID: k.ID()}

	release := c.bReads.holdNext(k.ID())
	defer release()
	loaded := make(chan error, 1)
	go func() {
		_, err := c.b.Publish(ctx, caller, chatText("while it loads"))
		loaded <- err
	}()
	require.Eventually(t, func() bool { return c.bReads.reads.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "b's load read the contract")
	require.NoError(t, c.a.RevokeContract(ctx, alice, k.ID()))
	c.tell(k.ID())
	require.Eventually(t, func() bool { return c.bNode.applied.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	release()
	requireCode(t, <-loaded, pigeon.CodeContractRevoked)
	_, err = c.b.Publish(ctx, caller, chatText("after"))
	requireCode(t, err, pigeon.CodeContractRevoked)
}

// TestClusterContractInDoubtThroughShutdown: an engine shut down while a
// contract is in doubt (its reads failing or hanging) ends its reading
// and shuts down, rather than wait for the store.
func TestClusterContractInDoubtThroughShutdown(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "reads fail", true: "a read hangs"}[hang], func(t *testing.T) {
			c := newDoubtCluster(t)
			sess, err := c.b.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			if hang {
				defer c.bReads.holdReads()()
			} else {
				c.bReads.set(true, false)
			}
			c.tell(sess.Contract().ID())
			c.requireLogged(t, "cannot read it again")
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, c.b.Shutdown(sctx))
		})
	}
}

// While a contract is in doubt, its node extends no cluster lease of a
// handler running under it, as while the node's directory is behind: the
// change may have revoked the consumer, and a revoked consumer must not
// keep its message from the group's other consumers. Once the contract is
// read and honoured again, its leases are extended again.
func TestClusterLeasesAreNotExtendedWhileContractInDoubt(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	n := &extendingNode{hubNode: h.node()}
	o := extendOptions()
	reads := &contractReads{nodeStore: viewOf(memory.New(nil))}
	o.Store, o.Cluster = reads, n
	e := startEngine(t, o)

	c := dupCases[0]
	consumer := dupConnect(t, e, c.sub, c.subject)
	free := holdExtendedJob(t, dupConnect(t, e, c.pub, c.subject), consumer, &n.writes)

	reads.set(true, false)
	h.broadcast(nil, pigeon.ClusterChange{Kind: pigeon.ChangeContract, ContractID: consumer.Contract().ID()})
	require.Eventually(t, func() bool {
		_, err := consumer.Receive(ctx, c.subject, 1)
		return pigeon.ErrorCode(err) == pigeon.CodeStoreUnavailable
	}, 10*time.Second, 5*time.Millisecond, "the contract is in doubt once it cannot be read")
	requireExtensionPaused(t, &n.writes, "a lease is extended while its contract is in doubt",
		func() { reads.set(false, false) }, "the lease is extended again once the contract is read")
	free()
}
