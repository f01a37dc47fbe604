package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// hub is an in-process pigeon.Cluster for engines sharing one store: what
// one node notifies the others get, and leases are one map.
type hub struct {
	mu     sync.Mutex
	nodes  []*hubNode
	leases map[string]*hubLease
	// now is the clock leases run out by (nil: the system clock); the
	// engines' Options.Now when the test moves time.
	now func() time.Time
	// progress, when set, is the store whose recorded attempts Acquire
	// counts from too (the larger of the lease's and the store's), as
	// store/jetstream's does.
	progress store.ProgressLog
}

// clock reads the hub's clock.
func (h *hub) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

type hubLease struct {
	node    *hubNode
	until   time.Time
	attempt int
	done    bool
}

type hubNode struct {
	h  *hub
	ch chan pigeon.ClusterChange
}

func (h *hub) node() *hubNode {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := &hubNode{h: h, ch: make(chan pigeon.ClusterChange, 1024)}
	h.nodes = append(h.nodes, n)
	return n
}

// broadcast tells every node but from of c (nil from: every node).
func (h *hub) broadcast(from *hubNode, c pigeon.ClusterChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.nodes {
		if n != from {
			n.ch <- c
		}
	}
}

func (n *hubNode) Notify(c pigeon.ClusterChange) { n.h.broadcast(n, c) }

func (n *hubNode) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	for {
		select {
		case c := <-n.ch:
			fn(c)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func leaseKey(key store.GroupKey, seq uint64) string {
	return fmt.Sprintf("%s\x00%s\x00%d", key.Subject, key.Group, seq)
}

func (n *hubNode) Acquire(_ context.Context, key store.GroupKey, seq uint64, deadline time.Time) (pigeon.LeaseState, error) {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	l := n.h.leases[leaseKey(key, seq)]
	switch {
	case l == nil:
		l = &hubLease{}
		n.h.leases[leaseKey(key, seq)] = l
	case l.done:
		return pigeon.LeaseState{Done: true}, nil
	case l.node != n && n.h.clock().Before(l.until):
		return pigeon.LeaseState{Until: l.until}, nil
	}
	next := l.attempt + 1
	if n.h.progress != nil {
		g, err := n.h.progress.LoadGroup(context.Background(), key)
		if err != nil {
			return pigeon.LeaseState{}, err
		}
		next = max(next, g.Attempts[seq]+1)
	}
	l.node, l.until, l.attempt = n, deadline, next
	return pigeon.LeaseState{Acquired: true, Attempt: l.attempt}, nil
}

var _ pigeon.LeaseReturner = (*hubNode)(nil)

// Return gives n's own lease of seq back uncounted, as the real store's
// does: only while n holds it (not done) at attempt; another node's, a
// settled one, one at another attempt or none writes nothing and fails
// ACK_NOT_ALLOWED. A repeat of a return written is no change.
func (n *hubNode) Return(_ context.Context, key store.GroupKey, seq uint64, attempt int, retryAt time.Time) error {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	l := n.h.leases[leaseKey(key, seq)]
	switch {
	case l == nil || l.node != n || l.done:
		return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is not this node's", seq)
	case l.attempt == attempt-1 && l.until.Equal(retryAt):
		return nil // returned already
	case l.attempt != attempt:
		return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is attempt %d, not %d", seq, l.attempt, attempt)
	}
	l.attempt, l.until = attempt-1, retryAt
	return nil
}

// Release ends n's own lease at attempt only, as the real store's does:
// a release of a lease another node holds or settled (it took the
// message over after n's ran out), of n's lease at another attempt (n
// leased the message again since), or of none writes nothing and fails
// ACK_NOT_ALLOWED. A done release repeated by the node that settled the
// lease is no change.
func (n *hubNode) Release(_ context.Context, key store.GroupKey, seq uint64, attempt int, done bool, retryAt time.Time) error {
	n.h.mu.Lock()
	defer n.h.mu.Unlock()
	l := n.h.leases[leaseKey(key, seq)]
	switch {
	case done && l != nil && l.node == n && l.done:
		return nil // settled already
	case l == nil || l.node != n || l.done || l.attempt != attempt:
		return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is not this node's at attempt %d", seq, attempt)
	case done:
		l.done = true
	default:
		l.until = retryAt
	}
	return nil
}

// nodeStore is a node's view of a shared store: everything shared but the
// audit log, which is the node's own chain.
type nodeStore struct {
	*memory.Store
	audit *memory.Store
}

func (n nodeStore) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	return n.audit.AppendAudit(ctx, recs...)
}

func (n nodeStore) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	return n.audit.ReadAudit(ctx, from, limit)
}

func (n nodeStore) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	return n.audit.AuditHead(ctx)
}

// twoNodes starts two engines on one store, joined by a hub.
func twoNodes(t *testing.T) (*hub, [2]*pigeon.Engine) {
	h := &hub{leases: map[string]*hubLease{}}
	st := memory.New(nil)
	var es [2]*pigeon.Engine
	for i := range es {
		o := transporttest.Options()
		o.Store, o.Cluster = nodeStore{Store: st, audit: memory.New(nil)}, h.node()
		e, err := pigeon.New(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		es[i] = e
	}
	return h, es
}

// Through the Cluster seam, two engines on one store share work-queue
// leases, replies, new messages and directory changes.
func TestClusterSeam(t *testing.T) {
	ctx := context.Background()

	t.Run("WorkQueue", func(t *testing.T) {
		_, es := twoNodes(t)
		var mu sync.Mutex
		handled, inFlight := map[string]int{}, map[string]bool{}
		overlap := false
		for i := range 4 {
			crew, err := es[i%2].Connect(ctx, "crew-token", []string{"jobs.batch"})
			require.NoError(t, err)
			_, err = crew.Subscribe(ctx, "jobs.batch", func(_ context.Context, d *pigeon.Delivery) error {
				mu.Lock()
				overlap = overlap || inFlight[d.Message.ID]
				inFlight[d.Message.ID] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				defer mu.Unlock()
				delete(inFlight, d.Message.ID)
				handled[d.Message.ID]++
				return nil
			})
			require.NoError(t, err)
		}
		boss, err := es[0].Connect(ctx, "boss-token", []string{"jobs.batch"})
		require.NoError(t, err)
		for n := range 20 {
			_, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.batch", Intent: "run", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(handled) == 20
		}, 30*time.Second, 5*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.False(t, overlap)
		for id, n := range handled {
			require.Equal(t, 1, n, id)
		}
	})

	t.Run("ReplyAndFanOut", func(t *testing.T) {
		_, es := twoNodes(t)
		gateway, err := es[1].Connect(ctx, "gateway-token", []string{"payments.authorize"})
		require.NoError(t, err)
		_, err = gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
			_, err := d.Session.Publish(ctx, demo.Approval(d.Message.ID))
			return err
		})
		require.NoError(t, err)
		checkout, err := es[0].Connect(ctx, "checkout-token", []string{"payments.authorize"})
		require.NoError(t, err)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		reply, err := checkout.Request(rctx, demo.Payment("o-1"))
		require.NoError(t, err)
		require.Equal(t, demo.Gateway, reply.Source)
	})

	t.Run("Renewal", func(t *testing.T) {
		// A contract renewed on one node holds on the other, which holds
		// it in memory with its old expiry: a subscription there goes on
		// past it, and so do publishes.
		_, es := twoNodes(t)
		const life = 700 * time.Millisecond
		alice, err := es[0].Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithContractTTL(life))
		require.NoError(t, err)
		k := alice.Contract()
		first := k.ExpiresAt()
		p, err := es[0].Authenticate(ctx, "alice-token")
		require.NoError(t, err)
		caller := pigeon.Caller{Principal: p, ContractID: k.ID()}
		got := make(chan string, 8)
		sub, err := es[1].Subscribe(ctx, caller, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
			got <- string(d.Message.Data)
			return nil
		})
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe(ctx) }()
		_, err = es[1].Publish(ctx, caller, chatMessage("before"))
		require.NoError(t, err)
		select {
		case m := <-got:
			require.Contains(t, m, "before")
		case <-time.After(10 * time.Second):
			t.Fatalf("no delivery before the renewal: %v", sub.Err())
		}

		renewed, err := es[0].RenewContract(ctx, p, k.ID(), time.Hour)
		require.NoError(t, err)
		time.Sleep(time.Until(first) + 100*time.Millisecond)
		_, err = es[1].Publish(ctx, caller, chatMessage("after"))
		require.NoError(t, err, "the other node reads the renewal")
		select {
		case m := <-got:
			require.Contains(t, m, "after")
		case <-time.After(10 * time.Second):
			t.Fatalf("the subscription on the other node ended at the old expiry: %v", sub.Err())
		}
		c, err := es[1].GetContract(ctx, p, k.ID())
		require.NoError(t, err)
		require.Equal(t, renewed.ExpiresAt().UnixNano(), c.ExpiresAt().UnixNano())
	})

	t.Run("Directory", func(t *testing.T) {
		h, es := twoNodes(t)
		_, err := es[0].PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "chat.messages", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
		require.NoError(t, err)
		h.broadcast(nil, pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
		require.Eventually(t, func() bool {
			_, err := es[1].GetRole(ctx, "member")
			return err == nil
		}, 30*time.Second, 5*time.Millisecond)
	})
}

// barrierNode is a hub node whose Barrier fails with err (nil: confirms).
type barrierNode struct {
	*hubNode
	mu    sync.Mutex
	err   error
	calls int
}

func (b *barrierNode) Barrier(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	return b.err
}

func (b *barrierNode) set(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err, b.calls = err, 0
}

// Every call that can take access away waits at the ClusterBarrier; when
// it fails the call answers CLUSTER_UNCONFIRMED and the change is made.
func TestClusterBarrierSeam(t *testing.T) {
	ctx := context.Background()
	h := &hub{leases: map[string]*hubLease{}}
	bn := &barrierNode{hubNode: h.node()}
	o := transporttest.Options()
	o.Store, o.Cluster = memory.New(nil), bn
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	alice, err := o.Authenticator.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	role := pigeon.Role{Name: "r", Permissions: []pigeon.Permission{{Subject: "chat.messages", Operations: []pigeon.Operation{pigeon.OpPublish}}}}

	for _, tc := range []struct {
		name   string
		change func() error
		check  func(t *testing.T)
	}{
		{"RevokeContract", func() error {
			sess, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			bn.set(errors.New("node p9 did not confirm"))
			err = e.RevokeContract(ctx, alice, sess.Contract().ID())
			_, perr := sess.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"kind":"chat","room":"a","text":"x"}`)})
			require.Equal(t, pigeon.CodeContractRevoked, pigeon.ErrorCode(perr), "the revocation is made: %v", perr)
			return err
		}, nil},
		{"RemoveAccountRole", func() error { _, err := e.RemoveAccountRole(ctx, "acc", "r"); return err }, func(t *testing.T) {
			a, err := e.GetAccount(ctx, "acc")
			require.NoError(t, err)
			require.NotContains(t, a.Roles, "r")
		}},
		{"PutRole", func() error {
			_, err := e.PutRole(ctx, pigeon.Role{Name: "r", Permissions: []pigeon.Permission{}})
			return err
		}, func(t *testing.T) {
			r, err := e.GetRole(ctx, "r")
			require.NoError(t, err)
			require.Empty(t, r.Permissions)
		}},
		{"DeleteRole", func() error { return e.DeleteRole(ctx, "r") }, func(t *testing.T) {
			_, err := e.GetRole(ctx, "r")
			require.Error(t, err)
		}},
		{"PutAccountKeys", func() error { _, err := e.PutAccountKeys(ctx, "acc", nil); return err }, nil},
		{"DeleteAccount", func() error { return e.DeleteAccount(ctx, "acc") }, func(t *testing.T) {
			_, err := e.GetAccount(ctx, "acc")
			require.Error(t, err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bn.set(nil)
			_, err := e.PutRole(ctx, role)
			require.NoError(t, err)
			_ = e.DeleteAccount(ctx, "acc")
			_, err = e.CreateAccount(ctx, pigeon.Account{ID: "acc", Roles: []string{"r"}})
			require.NoError(t, err)
			_, err = e.AddAccountRole(ctx, "acc", "r")
			require.NoError(t, err)

			bn.set(errors.New("node p9 did not confirm"))
			err = tc.change()
			require.Equal(t, pigeon.CodeClusterUnconfirmed, pigeon.ErrorCode(err), "%v", err)
			require.ErrorIs(t, err, pigeon.ErrStore)
			require.ErrorContains(t, err, "p9")
			require.Equal(t, 1, bn.calls)
			if tc.check != nil {
				tc.check(t)
			}
			bn.set(nil)
			_, err = e.AddAccountRole(ctx, "acc", "r")
			require.True(t, err == nil || pigeon.ErrorCode(err) == pigeon.CodeNotFound, "%v", err)
			require.Zero(t, bn.calls, "a change that takes nothing away does not wait")
		})
	}
}
