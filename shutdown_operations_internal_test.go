package pigeon

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// recordHold is an Observer that, once armed with an event, keeps the
// operation that queues the first record of it (entered tells when)
// until release is closed.
type recordHold struct {
	event            atomic.Pointer[Event]
	held             atomic.Bool
	entered, release chan struct{}
	freed            sync.Once
}

func newRecordHold() *recordHold {
	return &recordHold{entered: make(chan struct{}), release: make(chan struct{})}
}

// free lets the operation held go on; it may be called more than once.
func (o *recordHold) free() { o.freed.Do(func() { close(o.release) }) }

func (o *recordHold) Audited(r AuditRecord) {
	if ev := o.event.Load(); ev != nil && r.Type == string(*ev) && o.held.CompareAndSwap(false, true) {
		close(o.entered)
		<-o.release
	}
}

func (o *recordHold) Took(Stage, string, time.Duration)       {}
func (o *recordHold) Committed(CommitLog, int, time.Duration) {}
func (o *recordHold) Noted(Note, string)                      {}

const opsWho = "spiffe://test/ops"

// opsCatalog is one pub/sub subject opsWho publishes to and receives.
func opsCatalog(version string) *Catalog {
	rules := map[Operation][]RuleSpec{
		OpPublish: {{Effect: "allow", Principals: []string{opsWho}}},
		OpReceive: {{Effect: "allow", Principals: []string{opsWho}}},
	}
	return &Catalog{Subjects: []SubjectPolicy{{Name: "ops.x", Version: version, Mode: ModePubSub, Intents: []string{"test"}, Policy: rules}}}
}

// TestShutdownWaitsForOperationsThatRecord: an operation that writes an
// audit record or starts a goroutine of the engine's (a session's
// negotiation and renewals, a renewal, a revocation, a purge, a
// subscription, a handler, a catalog load, an authentication, a
// component's record) is counted in flight: held at its record while
// Shutdown begins, it keeps Shutdown from its last flush and from closing
// the store until it has answered, as it would have answered without
// Shutdown, with its record in the store. Before, none of them was
// counted: Shutdown went past them, and what they wrote or started after
// that (a record, a subscription's loop, a session's renewals) came after
// the last flush, the store's close and the wait for the engine's
// goroutines.
func TestShutdownWaitsForOperationsThatRecord(t *testing.T) {
	ctx := context.Background()
	type env struct {
		e *Engine
		p *Principal
		s Session
	}
	for _, tt := range []struct {
		name  string
		event Event
		// op runs the operation under test; want is the code it answers
		// (CodeOK: no error).
		op   func(v env) error
		want Code
	}{
		{name: "connect", event: EventContractNegotiated, op: func(v env) error {
			s, err := v.e.Connect(ctx, "t", []string{"ops.x"}) // renewed in the background until Shutdown
			if err == nil {
				_ = s.Close(ctx)
			}
			return err
		}},
		{name: "negotiate", event: EventContractNegotiated, op: func(v env) error {
			_, err := v.e.Negotiate(ctx, v.p, "", []string{"ops.x"}, 0)
			return err
		}},
		{name: "renew", event: EventContractRenewed, op: func(v env) error {
			_, err := v.e.RenewContract(ctx, v.p, v.s.Contract().ID(), time.Hour)
			return err
		}},
		{name: "revoke", event: EventContractRevoked, op: func(v env) error {
			return v.e.RevokeContract(ctx, v.p, v.s.Contract().ID())
		}},
		{name: "purge", event: EventPurgeDenied, want: CodeForbidden, op: func(v env) error {
			_, err := v.e.PurgeSubject(ctx, v.p, "ops.gone")
			return err
		}},
		{name: "subscribe", event: EventSubscriptionStarted, op: func(v env) error {
			_, err := v.s.Subscribe(ctx, "ops.x", func(context.Context, *Delivery) error { return nil })
			return err
		}},
		{name: "handle", event: EventSubscriptionStarted, op: func(v env) error {
			_, err := v.e.Handle(ctx, "t", "ops.x", func(context.Context, *Delivery) error { return nil })
			return err
		}},
		{name: "catalog", event: EventSubjectRegistered, op: func(v env) error {
			return v.e.LoadCatalog(ctx, opsCatalog("v2"))
		}},
		{name: "authentication", event: EventAuthFailed, want: CodeUnauthenticated, op: func(v env) error {
			_, err := v.e.AuthenticateCredential(ctx, Credential{Bearer: "not-a-token", RemoteAddr: "192.0.2.7:4000"})
			return err
		}},
		{name: "record", event: EventAccessDenied, op: func(v env) error {
			return v.e.Record(ctx, EventAccessDenied, CodeForbidden, AuditRecord{Principal: opsWho, Ref: "GET /v1/audit"})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.New(nil) // the application's: readable after Shutdown
			t.Cleanup(func() { _ = st.Close(ctx) })
			o := newRecordHold()
			e, err := New(ctx, &Options{
				Store:         st,
				Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}),
				Catalog:       opsCatalog("v1"),
				Observer:      o,
			})
			require.NoError(t, err)
			shut := false
			t.Cleanup(func() {
				if !shut {
					_ = e.Shutdown(ctx)
				}
			})
			t.Cleanup(o.free) // first, should the test fail while the observer holds
			p, err := e.Authenticate(ctx, "t")
			require.NoError(t, err)
			s, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
			require.NoError(t, err)

			ev := tt.event
			o.event.Store(&ev)
			answered := make(chan error, 1)
			go func() { answered <- tt.op(env{e: e, p: p, s: s}) }()
			select {
			case <-o.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the operation did not reach its record")
			}
			shutdown := make(chan error, 1)
			go func() { shutdown <- e.Shutdown(ctx) }()
			require.Eventually(t, e.closed.Load, 30*time.Second, time.Millisecond, "Shutdown began")
			require.NotZero(t, e.ops.n.Load()&^inflightClosed, "the operation held at its record is in flight")
			select {
			case <-e.ops.done():
				t.Fatal("Shutdown went past the operation in flight")
			default:
			}
			o.free()
			err = <-answered
			if tt.want == CodeOK {
				require.NoError(t, err, "the operation begun before Shutdown answers as without it")
			} else {
				require.Equal(t, tt.want, ErrorCode(err), "the operation begun before Shutdown answers as without it: %v", err)
			}
			require.NoError(t, <-shutdown)
			shut = true

			recs, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			found := false
			for _, r := range recs {
				found = found || r.Type == string(ev)
			}
			require.True(t, found, "its %s record is in the store", ev)
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
		})
	}
}

// TestNoRecordLeftQueuedAfterShutdown: a record queued without waiting
// for its write after Shutdown returned (a delivery's, a refusal's: a
// transport's late Recheck, say) is written by its caller, since no
// writer is left to write it, and a refusal is written rather than
// counted in a run no flush will write. On the application's store it is
// there; on the store the engine made, closed by Shutdown, the write
// fails and the failure is logged and counted, not dropped unseen.
// Before, such a record stayed in the queue for good, and the refusals
// after the first of a run were counted and never written.
func TestNoRecordLeftQueuedAfterShutdown(t *testing.T) {
	ctx := context.Background()
	refusal := func(code Code, principal string) store.AuditRecord {
		return EventAccessDenied.record(OutcomeDeny, code, store.AuditRecord{Principal: principal, Ref: "GET /v1/audit"})
	}
	for _, owned := range []bool{false, true} {
		name := "application's store"
		if owned {
			name = "engine's store"
		}
		t.Run(name, func(t *testing.T) {
			var st *memory.Store
			o := &Options{Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}), Catalog: opsCatalog("v1")}
			if !owned {
				st = memory.New(nil)
				t.Cleanup(func() { _ = st.Close(ctx) })
				o.Store = st
			}
			logs := &testlog.Buffer{}
			o.Logger = logs.Logger()
			e, err := New(ctx, o)
			require.NoError(t, err)
			require.NoError(t, e.Shutdown(ctx))

			for range 3 {
				e.auditAsync(refusal(CodeForbidden, opsWho))
			}
			e.auditAsync(EventDeliveryDispatched.record(OutcomeAllow, CodeOK, store.AuditRecord{Subject: "ops.x", Principal: opsWho, MessageID: "msg_1", Seqs: "1"}))
			a := &e.auditor
			a.mu.Lock()
			pending, failed := len(a.pending), a.failed
			a.mu.Unlock()
			require.Zero(t, pending, "no record is left in the queue")
			if owned {
				require.EqualValues(t, 4, failed, "every write failed on the closed store, and is counted")
				require.Contains(t, logs.String(), "could not be written", "and logged")
				return
			}
			recs, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			var denied, dispatched int
			for _, r := range recs {
				switch r.Type {
				case string(EventAccessDenied):
					require.NotContains(t, r.Ref, coalescedRef, "a refusal after Shutdown is written as it came")
					denied++
				case string(EventDeliveryDispatched):
					dispatched++
				}
			}
			require.Equal(t, 3, denied, "every refusal is in the store")
			require.Equal(t, 1, dispatched)
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
		})
	}
}

// embeddedMemory is the memory store behind a type of its own: the
// engine reserves an acceptance's place in the audit queue and fills it
// itself, as for any store it does not know, rather than the memory
// store queueing the record under its lock.
type embeddedMemory struct{ *memory.Store }

// TestAcceptanceWrittenWhenItsPublishLeaves: a Shutdown whose context
// ended while a publish was being judged returns without its last flush,
// and the audit writer stops; the publish, answered accepted later,
// writes its publish.accepted record as it leaves: the record is in the
// store when the publish answers, before any later Shutdown, whether the
// memory store queued it under its lock or the engine in the place it
// reserved. Before, it stayed in the queue until a later Shutdown flushed
// it, and with none, for good.
func TestAcceptanceWrittenWhenItsPublishLeaves(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		st   func(m *memory.Store) store.Store
	}{
		{name: "memory", st: func(m *memory.Store) store.Store { return m }},
		{name: "a store the engine does not know", st: func(m *memory.Store) store.Store { return embeddedMemory{m} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := memory.New(nil)
			t.Cleanup(func() { _ = m.Close(ctx) })
			entered, release := make(chan struct{}), make(chan struct{})
			var freed sync.Once
			free := func() { freed.Do(func() { close(release) }) }
			hold := GateFunc("hold", func(context.Context, *Admission) Verdict {
				close(entered)
				<-release
				return Allow()
			})
			e, err := New(ctx, &Options{
				Store:         tt.st(m),
				Authenticator: NewStaticTokens(StaticToken{Token: "t", Principal: opsWho}),
				Catalog:       opsCatalog("v1"),
				Gates:         []Gate{hold},
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Shutdown(ctx) })
			t.Cleanup(free) // first, should the test fail while the gate holds
			s, err := e.Connect(ctx, "t", []string{"ops.x"}, WithoutAutoRenew())
			require.NoError(t, err)

			type answer struct {
				res *Result
				err error
			}
			published := make(chan answer, 1)
			go func() {
				res, err := s.Publish(ctx, &Message{Type: "ops.done", Subject: "ops.x", Intent: "test", Data: []byte(`{"n":1}`)})
				published <- answer{res, err}
			}()
			select {
			case <-entered:
			case got := <-published:
				t.Fatalf("the publish did not reach the gate: %v", got.err)
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, e.Shutdown(cancelled), context.Canceled, "the publish in flight outlasts Shutdown's context")
			a := &e.auditor
			require.Eventually(t, func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return a.released && !a.writing
			}, 30*time.Second, time.Millisecond, "the audit writer stopped")

			free()
			got := <-published
			require.NoError(t, got.err)
			recs, err := m.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			found := false
			for _, r := range recs {
				found = found || r.Type == string(EventPublishAccepted) && r.MessageID == got.res.Message.ID
			}
			require.True(t, found, "the acceptance is in the store when the publish answers")
			_, err = store.VerifyAudit(ctx, m)
			require.NoError(t, err)
			require.NoError(t, e.Shutdown(ctx))
		})
	}
}
