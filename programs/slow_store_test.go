package programs_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store"
	"pigeon/store/memory"
)

// slowStore is a store whose writes of one kind block, once, until the
// test releases them: a durable or clustered store that is slow. Only
// the store.Store methods are promoted, so the engine writes its audit
// records through AppendAudit.
type slowStore struct {
	store.Store
	audit    func([]store.AuditRecord) bool  // the audit writes that block
	contract func(store.ContractRecord) bool // the contract writes that block
	entered  chan struct{}                   // closed when a write blocks
	release  chan struct{}                   // closed by the test
	once     sync.Once
}

func newSlowStore() *slowStore {
	return &slowStore{Store: memory.New(nil), entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowStore) unblock() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// hold blocks a write that matches until the test releases it; only the
// first write that matches.
func (s *slowStore) hold(match bool) {
	if !match {
		return
	}
	first := false
	s.once.Do(func() { first = true; close(s.entered) })
	if first {
		<-s.release
	}
}

func (s *slowStore) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	s.hold(s.audit != nil && s.audit(recs))
	return s.Store.AppendAudit(ctx, recs...)
}

func (s *slowStore) PutContract(ctx context.Context, c store.ContractRecord) error {
	s.hold(s.contract != nil && s.contract(c))
	return s.Store.PutContract(ctx, c)
}

// returned is a middleware that tells when a program's handler returns.
func returned(ch chan<- struct{}) pigeon.Middleware {
	return func(h pigeon.Handler) pigeon.Handler {
		return func(ctx context.Context, d *pigeon.Delivery) error {
			err := h(ctx, d)
			select {
			case ch <- struct{}{}:
			default:
			}
			return err
		}
	}
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal(what)
	}
}

// A host call never waits on the store past the message's time
// (limits.timeoutMs): the refusal of a message the engine never saw is
// audited, and the contract of a program whose account is gone revoked,
// under the call's context. Before, both waited (context.WithoutCancel)
// for the store's write, so a slow durable or clustered store held the
// call, its instance and its delivery for as long as the write took.
// The write is not given up: once the store answers, it is there.
func TestHostCallDoesNotWaitForASlowStore(t *testing.T) {
	const big = `{"type":"order","subject":"orders.out","intent":"record","classification":"internal","data":{}}`
	// publishThen publishes the message at 16 (length n: -1 is 2³²-1,
	// refused PAYLOAD_TOO_LARGE unread), then runs then.
	publishThen := func(n int64, then []byte) []byte {
		m := abiModule(cat(i32c(16), i32c(n), i32c(512), i32c(64), []byte{opCall, 0, opDrop}, then), 1)
		m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
		m.data = []wdata{{offset: 16, bytes: []byte(big)}}
		return m.encode()
	}
	t.Run("the refusal's audit record", func(t *testing.T) {
		st := newSlowStore()
		st.audit = func(recs []store.AuditRecord) bool {
			return slices.ContainsFunc(recs, func(r store.AuditRecord) bool { return r.Type == string(pigeon.EventPublishDenied) })
		}
		f := newFixture(t, st)
		// The handler loops after its publish, so the call ends at its
		// time limit once the host call returns. The delivery's own
		// program.failed record then queues behind the held write (its
		// wait is bounded too: TestProgramFailedRecordDoesNotHoldTheDelivery):
		// the call's end is seen in the log line written before it.
		mg, logs := loggingManager(t, f, slog.LevelWarn)
		t.Cleanup(st.unblock) // before the Manager and the fixture stop
		_, err := mg.Deploy(context.Background(), admin, "p", manifest(func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }), publishThen(-1, handleLoop))
		require.NoError(t, err)
		f.publish(t, "orders.in", `{"n":1}`)
		within(t, st.entered, "the refusal's record is never written")
		eventually(t, func() bool { return strings.Contains(logs.String(), "program delivery failed") },
			"the program's call waits for the store's write")
		require.Contains(t, logs.String(), string(pigeon.CodeProgramTimeout), "the wait took the message's time")
		st.unblock()
		eventually(t, func() bool {
			return slices.ContainsFunc(f.audited(t, pigeon.EventPublishDenied), func(r pigeon.AuditRecord) bool {
				return r.Code == string(pigeon.CodePayloadTooLarge) && r.Ref == "program:p@1"
			})
		}, "the refusal is audited once the store answers")
	})
	t.Run("the revocation of a deleted account's contract", func(t *testing.T) {
		st := newSlowStore()
		st.contract = func(c store.ContractRecord) bool { return c.Revoked && c.Principal == progAcc }
		done := make(chan struct{}, 1)
		f := newFixture(t, st, returned(done))
		t.Cleanup(st.unblock) // before the fixture stops
		_, err := f.mg.Deploy(context.Background(), admin, "p", manifest(func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }), publishThen(int64(len(big)), handleOK))
		require.NoError(t, err)
		require.NoError(t, f.e.DeleteAccount(context.Background(), progAcc))
		f.publish(t, "orders.in", `{"n":1}`)
		within(t, st.entered, "the contract is never revoked")
		within(t, done, "the program's call waits for the store's write")
		st.unblock()
		_, last, err := f.e.Bounds(context.Background(), "orders.out")
		require.NoError(t, err)
		require.Zero(t, last, "nothing is published under the contract being revoked")
		eventually(t, func() bool {
			return slices.ContainsFunc(f.audited(t, pigeon.EventContractRevoked), func(r pigeon.AuditRecord) bool { return r.Principal == progAcc })
		}, "the revocation is written once the store answers")
	})
}

// A call whose time ran out while the host waited for the store emits
// nothing more: its next publish aborts it, rather than leave one more
// write behind it each time. Before, each publish after the first was
// refused again and audited again, one goroutine waiting on the slow
// store per publish, up to limits.maxEmits a call.
func TestHostCallAfterItsTimeEmitsNothing(t *testing.T) {
	st := newSlowStore()
	st.audit = func(recs []store.AuditRecord) bool {
		return slices.ContainsFunc(recs, func(r store.AuditRecord) bool { return r.Type == string(pigeon.EventPublishDenied) })
	}
	f := newFixture(t, st)
	mg, logs := loggingManager(t, f, slog.LevelWarn)
	t.Cleanup(st.unblock) // before the Manager and the fixture stop
	// Three publishes in a row, straight-line code, each 2³²-1 bytes
	// long: refused PAYLOAD_TOO_LARGE unread.
	one := cat(i32c(16), i32c(-1), i32c(512), i32c(64), []byte{opCall, 0, opDrop})
	m := abiModule(cat(one, one, one, i32c(0)), 1)
	m.imports = []wimport{{module: "pigeon", name: "publish", params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	_, err := mg.Deploy(context.Background(), admin, "p", manifest(func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }), m.encode())
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	within(t, st.entered, "the refusal's record is never written")
	// The first refusal's wait ends with the call's time, and the call
	// with it. The failed delivery does not wait for the store either
	// (program.failed), so the message's second and last attempt (the
	// fixture's MaxAttempts) runs while the store still holds the first
	// refusal, and ends the same way; then the store answers, and Close
	// waits for every write the calls left behind.
	eventually(t, func() bool { return strings.Count(logs.String(), "program delivery failed") == 2 }, "both calls end")
	st.unblock()
	require.NoError(t, mg.Close(context.Background()))
	var refused int
	for _, r := range f.audited(t, pigeon.EventPublishDenied) {
		if r.Ref == "program:p@1" {
			refused++
		}
	}
	require.Equal(t, 2, refused, "one refusal a call: the publishes after the call's time are not refused one by one")
}
