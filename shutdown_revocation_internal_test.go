package pigeon

import (
	"context"
	"crypto/ed25519"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/memory"
)

// heldStore is the memory store behind a type of its own whose audit
// appends and whose Close can be held (hold), and whose Close calls are
// counted.
type heldStore struct {
	*memory.Store
	appendHold, closeHold holdPoint
	closes                atomic.Int32
}

// holdPoint keeps the next call that reaches it, once armed, until free;
// entered tells when one got there.
type holdPoint struct {
	armed            atomic.Bool
	entered, release chan struct{}
	freed            sync.Once
}

func (h *holdPoint) arm() {
	h.entered, h.release = make(chan struct{}), make(chan struct{})
	h.armed.Store(true)
}

func (h *holdPoint) free() {
	if h.release != nil {
		h.freed.Do(func() { close(h.release) })
	}
}

func (h *holdPoint) pass() {
	if h.armed.CompareAndSwap(true, false) {
		close(h.entered)
		<-h.release
	}
}

func (s *heldStore) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	s.appendHold.pass()
	return s.Store.AppendAudit(ctx, recs...)
}

func (s *heldStore) Close(ctx context.Context) error {
	s.closes.Add(1)
	s.closeHold.pass()
	return s.Store.Close(ctx)
}

// within waits for ch, failing the test after 30 s: what it waits for
// hangs without the fix under test.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still waiting after 30 s", what)
		panic("unreachable")
	}
}

// interruptedShutdown begins Shutdown and leaves it unfinished, as a
// Shutdown whose context ended while an operation was in flight: every
// operation is refused from then on, the audit writer has stopped, and
// the store is still open. The operation stays counted until the
// returned function is called.
func interruptedShutdown(t *testing.T, e *Engine) (leave func()) {
	t.Helper()
	require.True(t, e.ops.enter(), "an operation in flight")
	var once sync.Once
	leave = func() { once.Do(e.ops.leave) }
	t.Cleanup(leave)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, e.Shutdown(cancelled), context.Canceled, "the operation in flight outlasts Shutdown's context")
	return leave
}

// TestShutdownLastFlushBoundedByContext: a writer at work when Shutdown
// comes to its last flush (a caller writing its own record, held in the
// store's append) keeps the flush waiting; Shutdown returns its
// context's error once the context ends, and a later Shutdown, once the
// write is done, flushes and closes the store, once. Before, the last
// flush waited for the writer without a bound: Shutdown never returned.
func TestShutdownLastFlushBoundedByContext(t *testing.T) {
	ctx := context.Background()
	st := &heldStore{Store: memory.New(nil)}
	e, err := New(ctx, &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1")})
	require.NoError(t, err)
	e.ownStore = true // closed by Shutdown, as a store the engine made
	t.Cleanup(st.appendHold.free)
	leave := interruptedShutdown(t, e)
	leave()
	// The engine's goroutines, the audit writer among them, have ended:
	// the next Shutdown goes past its wait for them at once.
	require.Eventually(t, func() bool { return e.bg.n.Load()&^inflightClosed == 0 }, 30*time.Second, time.Millisecond, "the engine's goroutines ended")

	// A component's record after Shutdown began is written by its
	// caller, uncounted: held in the store's append, it is a writer at
	// work that Shutdown's last flush waits for.
	st.appendHold.arm()
	recorded := make(chan error, 1)
	go func() {
		recorded <- e.Record(ctx, EventAccessDenied, CodeForbidden, AuditRecord{Principal: opsWho, Ref: "GET /v1/audit"})
	}()
	within(t, st.appendHold.entered, "the record reaching the store")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- e.Shutdown(short) }()
	require.ErrorIs(t, within(t, shut, "Shutdown with a writer at work"), context.DeadlineExceeded)
	require.Zero(t, st.closes.Load(), "the store is not closed under the writer")

	st.appendHold.free()
	require.NoError(t, within(t, recorded, "the record"))
	recs, err := st.ReadAudit(ctx, 0, 0)
	require.NoError(t, err)
	require.Equal(t, string(EventAccessDenied), recs[len(recs)-1].Type, "the record is in the store")
	require.NoError(t, e.Shutdown(ctx), "a later Shutdown finishes")
	require.NoError(t, e.Shutdown(ctx))
	require.EqualValues(t, 1, st.closes.Load(), "the store is closed once")
}

// TestShutdownStoreCloseBoundedByContext: a Shutdown that finds another
// closing the store (held in the store's Close) waits for it only until
// its context ends, and returns the context's error; the store is closed
// once, and every Shutdown after returns nil. Before, it waited in a
// sync.Once for the other's Close, without a bound.
func TestShutdownStoreCloseBoundedByContext(t *testing.T) {
	ctx := context.Background()
	st := &heldStore{Store: memory.New(nil)}
	e, err := New(ctx, &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1")})
	require.NoError(t, err)
	e.ownStore = true
	st.closeHold.arm()
	t.Cleanup(st.closeHold.free)

	first := make(chan error, 1)
	go func() { first <- e.Shutdown(ctx) }()
	within(t, st.closeHold.entered, "the first Shutdown closing the store")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- e.Shutdown(short) }()
	require.ErrorIs(t, within(t, second, "a second Shutdown while the store closes"), context.DeadlineExceeded)

	st.closeHold.free()
	require.NoError(t, within(t, first, "the first Shutdown"))
	require.NoError(t, e.Shutdown(ctx))
	require.EqualValues(t, 1, st.closes.Load(), "the store is closed once")
}

const revAccount = "acct-rev"

// revocationEnv is an engine with a session of opsWho, an account
// revAccount holding role "r" (two permissions, one scoped to a route),
// two signing keys and a
// grant of role r, and the grant's id.
type revocationEnv struct {
	e   *Engine
	st  *memory.Store
	p   *Principal
	s   Session
	jti string
}

// testSigningKey is a published signing key named kid, made from seed.
func testSigningKey(kid string, seed byte) PublicKey {
	b := make([]byte, ed25519.SeedSize)
	b[0] = seed
	return Ed25519PublicKey(kid, ed25519.NewKeyFromSeed(b).Public().(ed25519.PublicKey))
}

var revRole = Role{Name: "r", Permissions: []Permission{
	{Subject: "ops.x", Operations: []Operation{OpPublish, OpReceive}},
	{Subject: "ops.y", Operations: []Operation{OpPublish}, Selector: "/kind=a"},
}}

func newRevocationEnv(t *testing.T, owned bool, o Observer) revocationEnv {
	t.Helper()
	ctx := context.Background()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	opts := &Options{Store: st, Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1"), Observer: o}
	e, err := New(ctx, opts)
	require.NoError(t, err)
	e.ownStore = owned // closed by Shutdown, as a store the engine made, when owned
	t.Cleanup(func() { _ = e.Shutdown(ctx) })
	_, err = e.PutRole(ctx, revRole)
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, Account{ID: revAccount, Roles: []string{"r"}})
	require.NoError(t, err)
	_, err = e.PutAccountKeys(ctx, revAccount, []PublicKey{testSigningKey("k1", 1), testSigningKey("k2", 2)})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, revAccount, []string{"r"}, time.Hour)
	require.NoError(t, err)
	p, err := e.Authenticate(ctx, "t")
	require.NoError(t, err)
	s, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
	require.NoError(t, err)
	return revocationEnv{e: e, st: st, p: p, s: s, jti: g.JTI}
}

// revocations are the changes that only take access away: each, its
// audit event, and a check that it was carried out.
var revocations = []struct {
	name  string
	event Event
	op    func(v revocationEnv) error
	done  func(t *testing.T, v revocationEnv)
}{
	{name: "revoke contract", event: EventContractRevoked, op: func(v revocationEnv) error {
		return v.e.RevokeContract(context.Background(), v.p, v.s.Contract().ID())
	}, done: func(t *testing.T, v revocationEnv) {
		c, err := v.st.GetContract(context.Background(), v.s.Contract().ID())
		require.NoError(t, err)
		require.True(t, c.Revoked)
	}},
	{name: "revoke grant", event: EventGrantRevoked, op: func(v revocationEnv) error {
		return v.e.RevokeGrant(context.Background(), v.jti)
	}, done: func(t *testing.T, v revocationEnv) {
		_, code := v.e.dir.effectiveRoles(revAccount, nil, v.jti, v.e.now())
		require.NotEqual(t, CodeOK, code, "the grant is refused")
	}},
	{name: "delete account", event: EventAccountDeleted, op: func(v revocationEnv) error {
		return v.e.DeleteAccount(context.Background(), revAccount)
	}, done: func(t *testing.T, v revocationEnv) {
		_, err := v.st.Get(context.Background(), bucketAccounts, revAccount)
		require.ErrorIs(t, err, store.ErrNotFound)
	}},
	{name: "remove account role", event: EventAccountRoleRemoved, op: func(v revocationEnv) error {
		_, err := v.e.RemoveAccountRole(context.Background(), revAccount, "r")
		return err
	}, done: func(t *testing.T, v revocationEnv) {
		a, err := v.e.GetAccount(context.Background(), revAccount)
		require.NoError(t, err)
		require.Empty(t, a.Roles)
	}},
	{name: "delete role", event: EventRoleDeleted, op: func(v revocationEnv) error {
		return v.e.DeleteRole(context.Background(), "r")
	}, done: func(t *testing.T, v revocationEnv) {
		_, err := v.st.Get(context.Background(), bucketRoles, "r")
		require.ErrorIs(t, err, store.ErrNotFound)
	}},
	{name: "narrow role", event: EventRoleDefined, op: func(v revocationEnv) error {
		_, err := v.e.PutRole(context.Background(), Role{Name: "r", Permissions: []Permission{{Subject: "ops.x", Operations: []Operation{OpReceive}}}})
		return err
	}, done: func(t *testing.T, v revocationEnv) {
		r, err := v.e.GetRole(context.Background(), "r")
		require.NoError(t, err)
		require.Equal(t, []Permission{{Subject: "ops.x", Operations: []Operation{OpReceive}}}, r.Permissions)
	}},
	{name: "remove key", event: EventAccountKeysPublished, op: func(v revocationEnv) error {
		_, err := v.e.PutAccountKeys(context.Background(), revAccount, []PublicKey{testSigningKey("k1", 1)})
		return err
	}, done: func(t *testing.T, v revocationEnv) {
		a, err := v.e.GetAccount(context.Background(), revAccount)
		require.NoError(t, err)
		require.Equal(t, []PublicKey{testSigningKey("k1", 1)}, a.Keys)
	}},
}

// hasRecord reports whether st holds a record of ev.
func hasRecord(t *testing.T, st store.AuditLog, ev Event) bool {
	t.Helper()
	recs, err := st.ReadAudit(context.Background(), 0, 0)
	require.NoError(t, err)
	for _, r := range recs {
		if r.Type == string(ev) {
			return true
		}
	}
	return false
}

// TestRevocationsGoOnDuringShutdown: once Shutdown began (its context
// ended while an operation was in flight, so the store is still open), a
// change that only takes access away is carried out and audited, on the
// store the engine made as on the application's; once Shutdown closed
// the engine's store it is refused SHUTTING_DOWN, retryable (ErrClosed),
// while on the application's store, still open, it is carried out.
// Before, each was refused SHUTTING_DOWN from the moment Shutdown began:
// a revocation asked during a rolling restart was lost, the access it
// removed left in the store for the next start and the other nodes.
func TestRevocationsGoOnDuringShutdown(t *testing.T) {
	ctx := context.Background()
	for _, tt := range revocations {
		for _, owned := range []bool{false, true} {
			name := tt.name + "/application's store"
			if owned {
				name = tt.name + "/engine's store"
			}
			t.Run(name, func(t *testing.T) {
				v := newRevocationEnv(t, owned, nil)
				leave := interruptedShutdown(t, v.e)
				require.NoError(t, tt.op(v), "carried out during Shutdown")
				tt.done(t, v)
				require.True(t, hasRecord(t, v.st, tt.event), "and audited")
				_, err := store.VerifyAudit(ctx, v.st)
				require.NoError(t, err)
				leave()
				require.NoError(t, v.e.Shutdown(ctx))
			})
			t.Run(name+"/after Shutdown", func(t *testing.T) {
				v := newRevocationEnv(t, owned, nil)
				require.NoError(t, v.e.Shutdown(ctx))
				err := tt.op(v)
				if owned {
					require.Equal(t, CodeShutdown, ErrorCode(err), "refused once the engine closed its store: %v", err)
					require.ErrorIs(t, err, ErrClosed, "retryable")
					return
				}
				require.NoError(t, err, "the application's store is open")
				tt.done(t, v)
				require.True(t, hasRecord(t, v.st, tt.event), "and audited")
			})
		}
	}
}

// TestGrantingChangesRefusedDuringShutdown: once Shutdown began, a change
// that gives access (or gives and takes) is refused SHUTTING_DOWN and
// changes nothing, the store open or not.
func TestGrantingChangesRefusedDuringShutdown(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		op   func(v revocationEnv) error
	}{
		{name: "create account", op: func(v revocationEnv) error {
			_, err := v.e.CreateAccount(ctx, Account{ID: "acct-new"})
			return err
		}},
		{name: "add account role", op: func(v revocationEnv) error {
			_, err := v.e.AddAccountRole(ctx, revAccount, "r2")
			return err
		}},
		{name: "issue grant", op: func(v revocationEnv) error {
			_, err := v.e.IssueGrant(ctx, revAccount, []string{"r"}, time.Hour)
			return err
		}},
		{name: "new role", op: func(v revocationEnv) error {
			_, err := v.e.PutRole(ctx, Role{Name: "r2", Permissions: []Permission{{Subject: "ops.x", Operations: []Operation{OpReceive}}}})
			return err
		}},
		{name: "role given an operation", op: func(v revocationEnv) error {
			_, err := v.e.PutRole(ctx, Role{Name: "r", Permissions: []Permission{{Subject: "ops.y", Operations: []Operation{OpPublish, OpReceive}, Selector: "/kind=a"}}})
			return err
		}},
		{name: "role given a subject", op: func(v revocationEnv) error {
			_, err := v.e.PutRole(ctx, Role{Name: "r", Permissions: []Permission{{Subject: "ops.z", Operations: []Operation{OpPublish}}}})
			return err
		}},
		{name: "role given another route", op: func(v revocationEnv) error {
			_, err := v.e.PutRole(ctx, Role{Name: "r", Permissions: []Permission{{Subject: "ops.y", Operations: []Operation{OpPublish}, Selector: "/kind=b"}}})
			return err
		}},
		{name: "key added", op: func(v revocationEnv) error {
			_, err := v.e.PutAccountKeys(ctx, revAccount, []PublicKey{testSigningKey("k1", 1), testSigningKey("k3", 3)})
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newRevocationEnv(t, false, nil)
			roles, accounts := v.e.ListRoles(ctx), v.e.ListAccounts(ctx)
			interruptedShutdown(t, v.e)
			before, err := v.st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			err = tt.op(v)
			require.Equal(t, CodeShutdown, ErrorCode(err), "refused: %v", err)
			require.Equal(t, roles, v.e.ListRoles(ctx), "no role changed")
			require.Equal(t, accounts, v.e.ListAccounts(ctx), "no account changed")
			after, err := v.st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			require.Len(t, after, len(before), "nothing audited")
		})
	}
}

// TestShutdownWaitsForRevocationInFlight: a revocation begun once
// Shutdown began, held at its record, keeps Shutdown from its last flush
// and from closing the store until it has answered; its record is in the
// store. Before, revocations were refused once Shutdown began; counted
// nowhere, one let in would have raced the store's close.
func TestShutdownWaitsForRevocationInFlight(t *testing.T) {
	ctx := context.Background()
	o := newRecordHold()
	v := newRevocationEnv(t, false, o)
	t.Cleanup(o.free)
	leave := interruptedShutdown(t, v.e)

	ev := EventContractRevoked
	o.event.Store(&ev)
	answered := make(chan error, 1)
	go func() { answered <- v.e.RevokeContract(ctx, v.p, v.s.Contract().ID()) }()
	within(t, o.entered, "the revocation reaching its record")
	leave()
	shut := make(chan error, 1)
	go func() { shut <- v.e.Shutdown(ctx) }()
	require.Eventually(t, func() bool { return v.e.revokes.n.Load()&inflightClosed != 0 }, 30*time.Second, time.Millisecond, "Shutdown came to the revocations")
	require.NotZero(t, v.e.revokes.n.Load()&^inflightClosed, "the revocation is in flight")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a revocation in flight", err)
	default:
	}
	o.free()
	require.NoError(t, within(t, answered, "the revocation"))
	require.NoError(t, within(t, shut, "Shutdown"))
	require.True(t, hasRecord(t, v.st, EventContractRevoked), "its record is in the store")
	_, err := store.VerifyAudit(ctx, v.st)
	require.NoError(t, err)
}

// TestShutdownWaitsForDuplicateSenderCheck: a Request that repeats
// another credential's request of the same account (its idempotency
// key) is refused after its publish answered duplicate, with a
// receive.denied record (sentBy); held at that record while Shutdown
// begins, it keeps Shutdown from its last flush until it has answered,
// and its record is in the store. Before, the check ran after the
// publish had left the count of operations in flight: Shutdown went past
// it, and its record came after the last flush.
func TestShutdownWaitsForDuplicateSenderCheck(t *testing.T) {
	ctx := context.Background()
	const who = "opsacct"
	rules := map[Operation][]RuleSpec{
		OpPublish: {{Effect: "allow", Principals: []string{who}}},
		OpReceive: {{Effect: "allow", Principals: []string{who}}},
	}
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	o := newRecordHold()
	e, err := New(ctx, &Options{
		Store:         st,
		Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: who}),
		Catalog:       &Catalog{Subjects: []SubjectPolicy{{Name: "ops.x", Version: "v1", Mode: ModePubSub, Intents: []string{"test"}, Policy: rules}}},
		Observer:      o,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(ctx) })
	t.Cleanup(o.free)
	_, err = e.PutRole(ctx, Role{Name: "r", Permissions: []Permission{{Subject: "ops.x", Operations: []Operation{OpPublish, OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, Account{ID: who, Roles: []string{"r"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, who, []string{"r"}, time.Hour)
	require.NoError(t, err)
	wide, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
	require.NoError(t, err)
	narrow, err := e.Connect(ctx, g.Token, []string{"ops.x"}, WithoutAutoRenew())
	require.NoError(t, err)
	msg := func() *Message {
		return &Message{Type: "ops.ask", Subject: "ops.x", Intent: "test", IdempotencyKey: "k-1", Data: []byte(`{"n":1}`)}
	}
	_, err = wide.Publish(ctx, msg())
	require.NoError(t, err)

	ev := EventReceiveDenied
	o.event.Store(&ev)
	asked := make(chan error, 1)
	go func() {
		_, err := narrow.Request(ctx, msg())
		asked <- err
	}()
	within(t, o.entered, "the request reaching its refusal's record")
	shut := make(chan error, 1)
	go func() { shut <- e.Shutdown(ctx) }()
	require.Eventually(t, e.closed.Load, 30*time.Second, time.Millisecond, "Shutdown began")
	require.NotZero(t, e.ops.n.Load()&^inflightClosed, "the check held at its record is in flight")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with the check in flight", err)
	default:
	}
	o.free()
	require.Equal(t, CodeContractPrincipalMismatch, ErrorCode(within(t, asked, "the request")))
	require.NoError(t, within(t, shut, "Shutdown"))
	require.True(t, hasRecord(t, st, EventReceiveDenied), "its record is in the store")
	_, err = store.VerifyAudit(ctx, st)
	require.NoError(t, err)
}
