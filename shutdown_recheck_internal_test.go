package pigeon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// TestShutdownWaitsForRecheck: a Recheck that refuses a contract (here
// one revoked), held at its receive.denied record while Shutdown begins,
// keeps Shutdown from its last flush until it has answered, and its
// record is in the store. Before, Recheck was not counted in flight:
// Shutdown went past it, and its record came after the last flush.
func TestShutdownWaitsForRecheck(t *testing.T) {
	ctx := context.Background()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	o := newRecordHold()
	e, err := New(ctx, &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1"), Observer: o})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(ctx) })
	t.Cleanup(o.free)
	p, err := e.Authenticate(ctx, "t")
	require.NoError(t, err)
	s, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
	require.NoError(t, err)
	require.NoError(t, e.RevokeContract(ctx, p, s.Contract().ID()))

	ev := EventReceiveDenied
	o.event.Store(&ev)
	checked := make(chan error, 1)
	go func() {
		checked <- e.Recheck(ctx, Caller{Principal: p, ContractID: s.Contract().ID()}, "ops.x", OpReceive)
	}()
	within(t, o.entered, "the recheck reaching its refusal's record")
	shut := make(chan error, 1)
	go func() { shut <- e.Shutdown(ctx) }()
	require.Eventually(t, e.closed.Load, 30*time.Second, time.Millisecond, "Shutdown began")
	require.NotZero(t, e.ops.n.Load()&^inflightClosed, "the recheck held at its record is in flight")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with the recheck in flight", err)
	default:
	}
	o.free()
	require.Equal(t, CodeContractRevoked, ErrorCode(within(t, checked, "the recheck")))
	require.NoError(t, within(t, shut, "Shutdown"))
	require.True(t, hasRecord(t, st, EventReceiveDenied), "its record is in the store")
	_, err = store.VerifyAudit(ctx, st)
	require.NoError(t, err)
}
