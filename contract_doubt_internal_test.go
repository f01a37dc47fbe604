package pigeon

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// heldReads is a store whose contract reads the test holds back: a held
// read reads the store at once and answers when released, as a read that
// began before a change and ends after it; with fail set, reads fail.
type heldReads struct {
	store.Store
	mu    sync.Mutex
	hold  chan struct{}
	fail  bool
	reads atomic.Int64 // reads that reached the store
}

func (s *heldReads) GetContract(ctx context.Context, id string) (store.ContractRecord, error) {
	s.mu.Lock()
	hold, fail := s.hold, s.fail
	s.hold = nil
	s.mu.Unlock()
	if fail {
		return store.ContractRecord{}, errReadFailed
	}
	rec, err := s.Store.GetContract(ctx, id)
	s.reads.Add(1)
	if hold != nil {
		<-hold
	}
	return rec, err
}

func (s *heldReads) holdNext() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hold = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (s *heldReads) setFail(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// doubtEngine is an engine on st with one subject, and a contract of p on
// it that the engine holds.
func doubtEngine(t *testing.T, st store.Store) (*Engine, *Principal, string) {
	t.Helper()
	const id = "spiffe://merchant-prod/ns/shop/sa/node-b"
	e, err := New(context.Background(), &Options{Store: st, Catalog: &Catalog{Subjects: []SubjectPolicy{{
		Name: "t.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"},
		Policy: map[Operation][]RuleSpec{OpPublish: {{Effect: "allow", Principals: []string{id}}}},
	}}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	p := &Principal{ID: id}
	c, err := e.Negotiate(context.Background(), p, "", []string{"t.x"}, time.Minute)
	require.NoError(t, err)
	return e, p, c.ID()
}

// revokeInStore revokes contract id in st, as another node's write does.
func revokeInStore(t *testing.T, st store.Store, id string) {
	t.Helper()
	rec, err := st.GetContract(context.Background(), id)
	require.NoError(t, err)
	rec.Revoked = true
	require.NoError(t, st.PutContract(context.Background(), rec))
}

// TestContractChangedAgainWhileItIsRead: a second change of a contract
// told while the read of the first is under way (it read the store
// before the second change was made) is not settled by that read: the
// contract is read again, and the revocation the second change made is
// applied.
func TestContractChangedAgainWhileItIsRead(t *testing.T) {
	ctx := context.Background()
	inner := memory.New(nil)
	st := &heldReads{Store: inner}
	e, p, id := doubtEngine(t, st)

	release := st.holdNext()
	defer release()
	first := make(chan struct{})
	go func() {
		defer close(first)
		e.applyChange(ClusterChange{Kind: ChangeContract, ContractID: id})
	}()
	require.Eventually(t, func() bool { return st.reads.Load() == 1 }, 10*time.Second, time.Millisecond, "the first change's read is under way")
	revokeInStore(t, inner, id)
	second := make(chan struct{})
	go func() {
		defer close(second)
		e.applyChange(ClusterChange{Kind: ChangeContract, ContractID: id})
	}()
	require.Eventually(t, func() bool {
		e.live.doubt.mu.Lock()
		defer e.live.doubt.mu.Unlock()
		ch := e.live.doubt.m[id]
		return ch != nil && ch.told == 2
	}, 10*time.Second, time.Millisecond, "the second change is told while the first is read")
	release()
	<-first
	<-second
	_, code, _ := e.checkContract(ctx, id, p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeContractRevoked, code, "the read that began before the second change does not settle it")
	require.Zero(t, e.live.doubt.held.Load())
}

// TestContractRevokedHereWhileInDoubt: a contract in doubt that its
// holder revokes on this node meanwhile needs no read: its revocation is
// final, and the doubt ends without waiting for the store.
func TestContractRevokedHereWhileInDoubt(t *testing.T) {
	ctx := context.Background()
	st := &heldReads{Store: memory.New(nil)}
	e, p, id := doubtEngine(t, st)
	st.setFail(true)
	e.applyChange(ClusterChange{Kind: ChangeContract, ContractID: id})
	require.True(t, e.contractInDoubt(id))
	_, code, reason := e.checkContract(ctx, id, p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeStoreUnavailable, code)
	require.Equal(t, doubtText, reason)

	require.NoError(t, e.RevokeContract(ctx, p, id))
	_, code, _ = e.checkContract(ctx, id, p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeContractRevoked, code)
	require.Eventually(t, func() bool { return !e.contractInDoubt(id) }, 10*time.Second, 5*time.Millisecond,
		"the doubt ends with the revocation, while the store still cannot be read")
}

// TestContractDoubtIsPerContract: a contract another node changed is in
// doubt alone; the checks of the others do not see it.
func TestContractDoubtIsPerContract(t *testing.T) {
	ctx := context.Background()
	st := &heldReads{Store: memory.New(nil)}
	e, p, id := doubtEngine(t, st)
	other, err := e.Negotiate(ctx, p, "", []string{"t.x"}, time.Minute)
	require.NoError(t, err)
	st.setFail(true)
	e.applyChange(ClusterChange{Kind: ChangeContract, ContractID: id})
	_, code, _ := e.checkContract(ctx, id, p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeStoreUnavailable, code)
	_, code, _ = e.checkContract(ctx, other.ID(), p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeOK, code)

	st.setFail(false)
	require.Eventually(t, func() bool { return !e.contractInDoubt(id) }, 10*time.Second, 5*time.Millisecond)
	_, code, _ = e.checkContract(ctx, id, p, e.subject("t.x"), OpPublish)
	require.Equal(t, CodeOK, code, "a contract the change did not revoke is honoured once read")
}
