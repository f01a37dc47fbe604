package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// badReads is a store whose next n directory listings and contract reads
// fail, as a store does while it loses its quorum for a moment, or, with
// panics set, panic, as a store of a third party with a bug might.
type badReads struct {
	store.Store
	panics      bool
	lists, gets atomic.Int32
}

var errReadFailed = errors.New("read failed")

func (s *badReads) bad(n *atomic.Int32, what string) error {
	if n.Add(-1) < 0 {
		return nil
	}
	if s.panics {
		panic(what + " failed on card 4111 1111 1111 1111")
	}
	return errReadFailed
}

func (s *badReads) List(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := s.bad(&s.lists, "list"); err != nil {
		return nil, err
	}
	return s.Store.List(ctx, bucket)
}

func (s *badReads) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	if err := s.bad(&s.gets, "get"); err != nil {
		return store.ContractRecord{}, err
	}
	return s.Store.GetContract(ctx, id)
}

// TestAnotherNodesChangeIsAppliedThroughFailedReads: a change another node
// made (a role taken from an account; a contract revoked, told without
// saying so) was read from the store when its notice came, and dropped
// when that read failed: the watch went on and confirmed it (the barrier
// the revoking node waits for), while this node still honoured the role
// or the contract until some later change. The change is now read again,
// with a growing pause, until it is applied.
func TestAnotherNodesChangeIsAppliedThroughFailedReads(t *testing.T) {
	testChangeAppliedThroughBadReads(t, false)
}

// TestAnotherNodesChangeIsAppliedThroughPanickedReads: a store read that
// panics while this node applies another node's change is a failed read:
// read again until the change is applied, the panic logged. applyChange
// may run on a goroutine of the Cluster's, where no caller could recover
// it. Before, the panic ended the process.
func TestAnotherNodesChangeIsAppliedThroughPanickedReads(t *testing.T) {
	testChangeAppliedThroughBadReads(t, true)
}

func testChangeAppliedThroughBadReads(t *testing.T, panics bool) {
	ctx := context.Background()
	const id = "spiffe://merchant-prod/ns/shop/sa/node-b"
	st := &badReads{Store: memory.New(nil), panics: panics}
	logs := &testlog.Buffer{}
	e, err := New(ctx, &Options{Store: st, Logger: logs.Logger(), Catalog: &Catalog{Subjects: []SubjectPolicy{{
		Name: "t.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"},
		Policy: map[Operation][]RuleSpec{OpPublish: {{Effect: "allow", Principals: []string{id}}}},
	}}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })

	t.Run("directory", func(t *testing.T) {
		_, err := e.CreateAccount(ctx, Account{ID: id, Roles: []string{"gone-elsewhere"}})
		require.NoError(t, err)
		// Another node takes the role: its write reaches the store, and
		// its notice this node.
		a, err := e.GetAccount(ctx, id)
		require.NoError(t, err)
		a.Roles = []string{}
		b, err := json.Marshal(a)
		require.NoError(t, err)
		require.NoError(t, st.Store.Put(ctx, bucketAccounts, id, b))
		st.lists.Store(2)
		e.applyChange(ClusterChange{Kind: ChangeDirectory})
		a, err = e.GetAccount(ctx, id)
		require.NoError(t, err)
		require.Empty(t, a.Roles, "the role another node took is gone here once its change is applied")
	})

	t.Run("contract", func(t *testing.T) {
		p := &Principal{ID: id}
		c, err := e.Negotiate(ctx, p, "", []string{"t.x"}, time.Minute)
		require.NoError(t, err)
		_, code, _ := e.checkContract(ctx, c.ID(), p, e.subject("t.x"), OpPublish)
		require.Equal(t, CodeOK, code)
		rec, err := st.Store.GetContract(ctx, c.ID())
		require.NoError(t, err)
		rec.Revoked = true
		require.NoError(t, st.Store.PutContract(ctx, rec))
		st.gets.Store(2)
		e.applyChange(ClusterChange{Kind: ChangeContract, ContractID: c.ID()})
		_, code, _ = e.checkContract(ctx, c.ID(), p, e.subject("t.x"), OpPublish)
		require.Equal(t, CodeContractRevoked, code, "the contract another node revoked is refused here once its change is applied")
	})

	if panics {
		out := logs.String()
		require.Contains(t, out, "reading a changed contract panicked")
		require.Contains(t, out, "reloading the access directory panicked")
		require.Contains(t, out, Redacted)
		require.NotContains(t, out, "4111 1111 1111 1111")
	}
}
