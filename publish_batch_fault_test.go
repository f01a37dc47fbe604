package pigeon_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestPublishBatchPanicAfterAppendStoresEachOnce: a panic that escapes
// once the store has a run of a batch (a Cluster's Notify, a fault of
// the answer) reaches the caller as Publish's would, and the messages of
// that run are stored once each: none is appended again on the way out,
// and none after the one that panicked is appended at all.
func TestPublishBatchPanicAfterAppendStoresEachOnce(t *testing.T) {
	st := memory.New(nil)
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	pub := f.connect("checkout-token", "payments.authorize")
	var appended, panicked atomic.Int32
	f.e.SetAfterAppend(func(store.Message) {
		if appended.Add(1) == 3 && panicked.CompareAndSwap(0, 1) {
			panic("a fault after the append")
		}
	})
	var msgs []*pigeon.Message
	for i := range 40 { // more than one run: the first is appended before the batch ends
		msgs = append(msgs, demo.Payment("o-panic-"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	require.PanicsWithValue(t, "a fault after the append", func() {
		f.e.PublishBatch(ctx, callerOf(pub), msgs)
	})
	f.e.SetAfterAppend(nil)

	seen := map[string]int{}
	sms, err := st.Read(ctx, "payments.authorize", 1, 1000)
	require.NoError(t, err)
	for _, sm := range sms {
		seen[sm.ID]++
		require.Equal(t, 1, seen[sm.ID], "message %s stored twice", sm.ID)
	}
	require.LessOrEqual(t, len(sms), 16, "no run after the one that panicked is appended")
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestPublishBatchRevokedContractRefusesHeld: a contract revoked while a
// batch is judged (here by a gate, between two of its messages) takes
// effect for every message of the batch not yet appended: those judged
// after it are refused CONTRACT_REVOKED at the contract gate, and so are
// those judged before it and still held for the append, so that no
// acceptance under the contract is recorded after its revocation.
func TestPublishBatchRevokedContractRefusesHeld(t *testing.T) {
	var revoke atomic.Pointer[func()]
	var judged atomic.Int32
	f := newFixture(t, func(o *pigeon.Options) {
		o.Gates = append(o.Gates, pigeon.GateFunc("revoker", func(context.Context, *pigeon.Admission) pigeon.Verdict {
			if judged.Add(1) == 5 {
				(*revoke.Load())()
			}
			return pigeon.Allow()
		}))
	})
	pub := f.connect("checkout-token", "payments.authorize")
	c := callerOf(pub)
	fn := func() { require.NoError(t, f.e.RevokeContract(context.Background(), c.Principal, c.ContractID)) }
	revoke.Store(&fn)

	var msgs []*pigeon.Message
	for i := range 10 {
		msgs = append(msgs, demo.Payment("o-revoked-"+string(rune('a'+i))))
	}
	got := f.e.PublishBatch(ctx, c, msgs)
	for i, p := range got {
		requireCode(t, p.Err, pigeon.CodeContractRevoked)
		require.Nil(t, p.Result, "message %d", i)
	}

	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	revokedAt := -1
	for i, r := range recs {
		if r.Type == string(pigeon.EventContractRevoked) && r.ContractID == c.ContractID {
			revokedAt = i
		}
		if r.Type == string(pigeon.EventPublishAccepted) && r.ContractID == c.ContractID {
			require.Equal(t, -1, revokedAt, "an acceptance under the contract after its revocation: %+v", r)
		}
	}
	require.NotEqual(t, -1, revokedAt)
	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestPublishBatchRoleRemovedRefusesHeld: a role the contract relied on,
// removed while a batch is judged, takes effect for every message of the
// batch not yet appended, those judged before the removal and still held
// included: GRANT_REVOKED, as the contract gate answers from then on.
func TestPublishBatchRoleRemovedRefusesHeld(t *testing.T) {
	var judged atomic.Int32
	var remove atomic.Pointer[func()]
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Gates = append(o.Gates, pigeon.GateFunc("remover", func(context.Context, *pigeon.Admission) pigeon.Verdict {
			if judged.Add(1) == 5 {
				(*remove.Load())()
			}
			return pigeon.Allow()
		}))
	})
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	c := f.connect("carol-token", "rooms.chat")
	fn := func() {
		_, err := e.RemoveAccountRole(context.Background(), carol, "member")
		require.NoError(t, err)
	}
	remove.Store(&fn)

	var msgs []*pigeon.Message
	for i := range 10 {
		msgs = append(msgs, chatIn("lobby", "m"+string(rune('a'+i))))
	}
	for i, p := range e.PublishBatch(ctx, callerOf(c), msgs) {
		requireCode(t, p.Err, pigeon.CodeGrantRevoked)
		require.Nil(t, p.Result, "message %d", i)
	}
}
