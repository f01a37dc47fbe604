package pigeon_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// panickyStore is a memory store (every optional ability of it kept)
// whose method panics, quoting a card number, on its next left calls, as
// a store of a third party with a bug might; calls counts the calls of
// method.
type panickyStore struct {
	*memory.Store
	method string
	left   *atomic.Int32
	calls  *atomic.Int32
}

func newPanickyStore(method string, left int32) panickyStore {
	s := panickyStore{Store: memory.New(nil), method: method, left: &atomic.Int32{}, calls: &atomic.Int32{}}
	s.left.Store(left)
	return s
}

func (s panickyStore) maybePanic(method string) {
	if method != s.method {
		return
	}
	s.calls.Add(1)
	for n := s.left.Load(); n > 0; n = s.left.Load() {
		if s.left.CompareAndSwap(n, n-1) {
			panic("store " + method + " failed on card 4111 1111 1111 1111")
		}
	}
}

// fired reports whether every panic asked for has happened.
func (s panickyStore) fired() bool { return s.left.Load() == 0 }

func (s panickyStore) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	s.maybePanic("AppendAudit")
	return s.Store.AppendAudit(ctx, recs...)
}

func (s panickyStore) DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error) {
	s.maybePanic("DeleteExpiredContracts")
	return s.Store.DeleteExpiredContracts(ctx, t)
}

func (s panickyStore) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	s.maybePanic("TrimThrough")
	return s.Store.TrimThrough(ctx, subject, seq)
}

func (s panickyStore) RaiseFloor(ctx context.Context, key store.GroupKey, floor uint64) error {
	s.maybePanic("RaiseFloor")
	return s.Store.RaiseFloor(ctx, key, floor)
}

// PruneGroups, when it panics, first takes the group "stuck" of
// tasks.run for pruning (the engine's stand-in takes its place), as a
// store failing half way through would.
func (s panickyStore) PruneGroups(ctx context.Context, subject string, t time.Time, keep func(group string) bool) (int, error) {
	if subject == "tasks.run" {
		if s.method == "PruneGroups" && s.left.Load() > 0 {
			keep("stuck")
		}
		s.maybePanic("PruneGroups")
	}
	return s.Store.PruneGroups(ctx, subject, t, keep)
}

func (s panickyStore) Bytes(ctx context.Context, subject string) (uint64, error) {
	s.maybePanic("Bytes")
	return s.Store.Bytes(ctx, subject)
}

func (s panickyStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	s.maybePanic("PutContract")
	return s.Store.PutContract(ctx, c)
}

// requirePanicLogged requires logs to hold the engine's report of a
// panic of where, its stack, and the card number redacted.
func requirePanicLogged(t *testing.T, logs *testlog.Buffer, where string) {
	t.Helper()
	out := logs.String()
	require.Contains(t, out, where+" panicked")
	require.Contains(t, out, "runtime/debug.Stack", "the stack is logged")
	require.Contains(t, out, pigeon.Redacted)
	require.NotContains(t, out, "4111 1111 1111 1111")
}

// engineOn is an engine on transporttest's catalog over st, logging to
// logs, with mutate applied to its options; it is shut down when t ends.
func engineOn(t *testing.T, st store.Store, logs *testlog.Buffer, mutate ...func(*pigeon.Options)) *pigeon.Engine {
	t.Helper()
	o := transporttest.Options()
	o.Store, o.Logger = st, logs.Logger()
	for _, m := range mutate {
		m(o)
	}
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

// TestAuditWritePanicFailsClosed: a store whose audit append panics is a
// store whose audit append failed: the caller waiting for its record
// learns STORE_UNAVAILABLE, operations that must leave evidence are
// refused while the log cannot be written (the probe's write panics
// too), and once a write succeeds the log says how many records were
// lost, its chain whole. Before, the panic ended the process (on the
// background writer), or left the writer's lock unlocked under a
// deferred unlock (fatal: sync: unlock of unlocked mutex).
func TestAuditWritePanicFailsClosed(t *testing.T) {
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	st := newPanickyStore("AppendAudit", 0)
	logs := &testlog.Buffer{}
	e := engineOn(t, st, logs)
	_, err := e.Audit(ctx, 0, 0) // what New recorded is written
	require.NoError(t, err)

	st.left.Store(2) // the next write, and the probe's
	err = e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "p"})
	requireCode(t, err, pigeon.CodeStoreUnavailable)
	_, err = e.Connect(ctx, "alice-token", []string{"chat.messages"})
	requireCode(t, err, pigeon.CodeStoreUnavailable) // fails closed
	require.True(t, st.fired())

	s, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err, "the log is written again")
	_, err = s.Publish(ctx, chatMessage("after"))
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	resumed := auditOf(t, e, pigeon.EventAuditResumed)
	require.NotEmpty(t, resumed)
	require.True(t, strings.HasSuffix(resumed[0].Ref, " records could not be written"), resumed[0].Ref)
	require.NotEqual(t, "0 records could not be written", resumed[0].Ref)
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err, "the chain is whole")
	requirePanicLogged(t, logs, "the audit log's write")
}

// TestJanitorSurvivesAStorePanic: a store that panics in the janitor's
// sweep ends that sweep alone; the next tick sweeps again. With
// PruneGroups, the panic comes once a group was taken for pruning: its
// place in the engine's table is given back, and a subscriber of the
// group goes on. Before, the panic ended the process.
func TestJanitorSurvivesAStorePanic(t *testing.T) {
	for _, method := range []string{"DeleteExpiredContracts", "PruneGroups"} {
		t.Run(method, func(t *testing.T) {
			st := newPanickyStore(method, 1)
			logs := &testlog.Buffer{}
			f := evictFixture(t, func(o *pigeon.Options) {
				o.Store, o.Logger, o.SweepInterval = st, logs.Logger(), time.Millisecond
			})
			require.Eventually(t, func() bool { return st.fired() && st.calls.Load() >= 3 }, 30*time.Second, time.Millisecond,
				"later sweeps run")
			requirePanicLogged(t, logs, "the janitor's sweep")

			boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
			got := make(chan struct{}, 1)
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := bob.Subscribe(sctx, "tasks.run", func(context.Context, *pigeon.Delivery) error {
				got <- struct{}{}
				return nil
			}, pigeon.WithGroup("stuck"))
			require.NoError(t, err)
			publishTasks(t, boss, 1, 1)
			select {
			case <-got:
			case <-sctx.Done():
				t.Fatal("the group's subscriber got nothing")
			}
		})
	}
}

// TestBoundTrimmerSurvivesAStorePanic: a store that panics in a trim
// asked for by a subject past retention.maxMessages ends that trim
// alone: the subject asks again with its next message, and is trimmed
// back within its bound. With RaiseFloor, the panic comes while a
// group's lock is held (raising its floor past the trim): the group is
// unlocked and let go, and its consumer goes on. Before, the panic ended
// the process.
func TestBoundTrimmerSurvivesAStorePanic(t *testing.T) {
	const keep, slack = 10, 32
	for _, method := range []string{"TrimThrough", "RaiseFloor"} {
		t.Run(method, func(t *testing.T) {
			st := newPanickyStore(method, 1)
			logs := &testlog.Buffer{}
			f := evictFixture(t, func(o *pigeon.Options) {
				o.Store, o.Logger, o.SweepInterval = st, logs.Logger(), time.Hour
				for i, s := range o.Catalog.Subjects {
					if s.Name == "tasks.run" {
						o.Catalog.Subjects[i].Retention.MaxMessages = keep
					}
				}
			})
			boss, bob := f.connect("boss-token", "tasks.run"), f.connect("bob-token", "tasks.run")
			// A consumer whose first delivery waits: its group stays in
			// memory, its floor behind every trim.
			got, let := make(chan int, 1024), make(chan struct{})
			sub, err := bob.Subscribe(ctx, "tasks.run", func(ctx context.Context, d *pigeon.Delivery) error {
				var m struct{ N int }
				require.NoError(t, json.Unmarshal(d.Message.Data, &m))
				got <- m.N
				select {
				case <-let:
				case <-ctx.Done():
				}
				return nil
			})
			require.NoError(t, err)
			publishTasks(t, boss, 1, 1)
			require.Equal(t, 1, <-got)
			n := 1
			for !st.fired() {
				require.Less(t, n, 10000, "no trim was asked for")
				n++
				publishTasks(t, boss, n, n)
			}
			// The subject asks again: one of the next messages does.
			trimmed := func() bool {
				first, _, err := st.Bounds(ctx, "tasks.run")
				require.NoError(t, err)
				return first > 1 && st.calls.Load() >= 2
			}
			for !trimmed() {
				require.Less(t, n, 10000, "no trim after the panic")
				n++
				publishTasks(t, boss, n, n)
			}
			require.Eventually(t, func() bool {
				first, last, err := st.Bounds(ctx, "tasks.run")
				require.NoError(t, err)
				return last-first+1 <= keep+slack
			}, 30*time.Second, time.Millisecond, "back within the bound")
			// The consumer goes on: its group's lock was let go.
			close(let)
			publishTasks(t, boss, n+1, n+1)
			deadline := time.After(30 * time.Second)
			for last := false; !last; {
				select {
				case m := <-got:
					last = m == n+1
				case <-deadline:
					t.Fatalf("the consumer stopped: %v", sub.Err())
				}
			}
			requirePanicLogged(t, logs, "the trim of subject tasks.run beyond retention.maxMessages or maxBytes")
		})
	}
}

// TestRenewalSurvivesAStorePanic: a store that panics saving a renewed
// contract fails that renewal: the contract's expiry stays as the store
// has it, and the session's renewal loop tries again and renews it.
// Before, the panic ended the process.
func TestRenewalSurvivesAStorePanic(t *testing.T) {
	st := newPanickyStore("PutContract", 0)
	logs := &testlog.Buffer{}
	f := newFixture(t, func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog, o.Authenticator, o.Now = base.Catalog, base.Authenticator, nil
		o.Store, o.Logger = st, logs.Logger()
	})
	alice, err := f.e.Connect(ctx, "alice-token", []string{"chat.messages"}, pigeon.WithContractTTL(3*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = alice.Close(context.Background()) })
	first := alice.Contract().ExpiresAt()
	st.left.Store(1) // the first renewal's write
	require.Eventually(t, func() bool {
		rec, err := st.GetContract(ctx, alice.Contract().ID())
		require.NoError(t, err)
		return st.fired() && rec.ExpiresAt.After(first)
	}, 30*time.Second, 5*time.Millisecond, "renewed after the panic")
	require.NotEmpty(t, auditOf(t, f.e, pigeon.EventContractRenewed))
	require.True(t, alice.Contract().ExpiresAt().After(first))
	_, err = alice.Publish(ctx, chatMessage("renewed"))
	require.NoError(t, err)
	requirePanicLogged(t, logs, "saving a renewed contract")
}

// panickyWatch is a hub node whose first Watch panics.
type panickyWatch struct {
	*hubNode
	calls atomic.Int32
}

func (n *panickyWatch) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	if n.calls.Add(1) == 1 {
		panic("watch failed on card 4111 1111 1111 1111")
	}
	return n.hubNode.Watch(ctx, fn)
}

// TestClusterWatchPanicIsRetried: a Cluster whose Watch panics is a
// watch that failed: the engine watches again, and applies what the
// other nodes changed (an account created). Before, the panic ended the
// process.
func TestClusterWatchPanicIsRetried(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	st := memory.New(nil)
	pw := &panickyWatch{hubNode: h.node()}
	logs := &testlog.Buffer{}
	var es [2]*pigeon.Engine
	for i := range es {
		o := transporttest.Options()
		o.Store = nodeStore{Store: st, audit: memory.New(nil)}
		if i == 0 {
			o.Cluster = h.node()
		} else {
			o.Cluster, o.Logger = pw, logs.Logger()
		}
		e, err := pigeon.New(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		es[i] = e
	}
	// Another node creates an account, and its Cluster tells the others.
	_, err := es[0].CreateAccount(ctx, pigeon.Account{ID: "acct-after-the-panic"})
	require.NoError(t, err)
	h.broadcast(nil, pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
	require.Eventually(t, func() bool {
		_, err := es[1].GetAccount(ctx, "acct-after-the-panic")
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "the change reaches the node whose watch panicked")
	require.GreaterOrEqual(t, pw.calls.Load(), int32(2))
	requirePanicLogged(t, logs, "the cluster's watch")
}

// TestBackgroundTaskSurvivesAStorePanic: a store that panics in a task
// the engine runs once in the background (counting a subject's bytes
// when its retention.maxBytes is loaded) ends that task alone, logged;
// the engine goes on. Before, the panic ended the process.
func TestBackgroundTaskSurvivesAStorePanic(t *testing.T) {
	st := newPanickyStore("Bytes", 1)
	logs := &testlog.Buffer{}
	f := evictFixture(t, func(o *pigeon.Options) {
		o.Store, o.Logger, o.SweepInterval = st, logs.Logger(), time.Hour
		for i, s := range o.Catalog.Subjects {
			if s.Name == "tasks.run" {
				o.Catalog.Subjects[i].Retention.MaxBytes = 1 << 20
			}
		}
	})
	require.Eventually(t, st.fired, 30*time.Second, time.Millisecond, "the count ran")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "a background task of the engine panicked") },
		30*time.Second, time.Millisecond)
	requirePanicLogged(t, logs, "a background task of the engine")
	publishTasks(t, f.connect("boss-token", "tasks.run"), 1, 3)
}

// panickyClock is the system clock, but panics once, when armed, when
// called from a function whose name starts with in.
type panickyClock struct {
	in    string
	armed atomic.Bool
}

func (c *panickyClock) Now() time.Time {
	if c.armed.Load() && calledFrom(c.in) && c.armed.CompareAndSwap(true, false) {
		panic("clock failed on card 4111 1111 1111 1111")
	}
	return time.Now()
}

// calledFrom reports whether a function whose name starts with prefix is
// among the caller's callers.
func calledFrom(prefix string) bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(3, pc)])
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestAuditWriterSurvivesAClockPanic: the application's clock (Options.Now)
// panicking while the audit writer holds its lock, as it dates the record
// that says how many records a broken log lost, is answered by the system
// clock (steadyClock), logged: the write goes on, the log is whole again
// and says what it lost, and nobody waits for a writer that is gone.
// Before, the panic reached the caller waiting for its record, or ended
// the process from the background writer.
func TestAuditWriterSurvivesAClockPanic(t *testing.T) {
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	st := newPanickyStore("AppendAudit", 0)
	clock := &panickyClock{in: "pigeon.(*Engine).writeAudit"}
	logs := &testlog.Buffer{}
	e := engineOn(t, st, logs, func(o *pigeon.Options) { o.Now = clock.Now })

	st.left.Store(1)
	err := e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "lost"})
	requireCode(t, err, pigeon.CodeStoreUnavailable)
	clock.armed.Store(true)
	require.NoError(t, e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "kept"}))
	require.False(t, clock.armed.Load(), "the clock panicked")

	s, err := e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	resumed := auditOf(t, e, pigeon.EventAuditResumed)
	require.Len(t, resumed, 1)
	require.Equal(t, "1 records could not be written", resumed[0].Ref)
	var refs []string
	for _, r := range auditOf(t, e, pigeon.EventProgramDeployed) {
		refs = append(refs, r.Ref)
	}
	require.Equal(t, []string{"kept"}, refs)
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
	requirePanicLogged(t, logs, "the clock (Options.Now)")
}

// panickyHandler is a log handler that panics once, when armed, on a
// record whose message is msg, and otherwise writes to next.
type panickyHandler struct {
	slog.Handler
	msg   string
	armed *atomic.Bool
}

func (h panickyHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg && h.armed.CompareAndSwap(true, false) {
		panic("logger failed on card 4111 1111 1111 1111")
	}
	return h.Handler.Handle(ctx, r)
}

func (h panickyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return panickyHandler{h.Handler.WithAttrs(as), h.msg, h.armed}
}

func (h panickyHandler) WithGroup(name string) slog.Handler {
	return panickyHandler{h.Handler.WithGroup(name), h.msg, h.armed}
}

// TestAuditWriterSurvivesALoggerPanic: the application's logger panicking
// while the audit writer holds its lock (as it says the log is writable
// again) ends that call of the writer as a return would: the writer is no
// longer marked writing, so the next record is written rather than waited
// for, and the audit chain stays whole. Before, the writer was left marked
// writing with its lock released by the panic's unwinding: the process
// ended, or every later record waited for ever.
func TestAuditWriterSurvivesALoggerPanic(t *testing.T) {
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	st := newPanickyStore("AppendAudit", 0)
	logs := &testlog.Buffer{}
	armed := &atomic.Bool{}
	e := engineOn(t, st, logs, func(o *pigeon.Options) {
		o.Logger = slog.New(panickyHandler{o.Logger.Handler(), "audit log is writable again", armed})
	})

	st.left.Store(1)
	err := e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "lost"})
	requireCode(t, err, pigeon.CodeStoreUnavailable)
	armed.Store(true)
	_ = e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "kept"})
	require.False(t, armed.Load(), "the logger panicked")
	require.NoError(t, e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "after"}),
		"a record after the panic is written, not waited for")
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
	requirePanicLogged(t, logs, "the audit writer")
}

func (s panickyStore) ReadAudit(ctx context.Context, from uint64, max int) ([]store.AuditRecord, error) {
	s.maybePanic("ReadAudit")
	return s.Store.ReadAudit(ctx, from, max)
}

// TestVerifyAuditWalkPanicIsAFailedWalk: a store whose read of the audit
// log panics during VerifyAudit's walk (run on a goroutine of the
// engine's) fails that walk, INTERNAL: its caller is answered at once and
// the next VerifyAudit walks again and verifies. Before, the walk's
// goroutine ended without answering (the backstop's recover), and every
// VerifyAudit after it waited for it until its own ctx ended.
func TestVerifyAuditWalkPanicIsAFailedWalk(t *testing.T) {
	ctx, cancel := contextWithTimeout(30 * time.Second)
	defer cancel()
	st := newPanickyStore("ReadAudit", 0)
	logs := &testlog.Buffer{}
	e := engineOn(t, st, logs)
	require.NoError(t, e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "one"}))

	st.left.Store(1)
	_, err := e.VerifyAudit(ctx)
	requireCode(t, err, pigeon.CodeInternal)
	require.True(t, st.fired(), "the walk's read panicked")
	n, err := e.VerifyAudit(ctx)
	require.NoError(t, err, "the next walk verifies")
	require.Positive(t, n)
	requirePanicLogged(t, logs, "the audit walk")
}
