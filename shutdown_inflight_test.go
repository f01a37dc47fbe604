package pigeon_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
)

// holdGate is a gate that, while holding is set, keeps the first message
// it judges (entered tells when) until release is closed, then allows it;
// while quarantining is set it quarantines every message; otherwise it
// allows.
type holdGate struct {
	holding, quarantining atomic.Bool
	held                  atomic.Bool
	entered, release      chan struct{}
	freed                 sync.Once
}

// free lets the message held go on; it may be called more than once.
func (g *holdGate) free() { g.freed.Do(func() { close(g.release) }) }

func newHoldGate() *holdGate {
	return &holdGate{entered: make(chan struct{}), release: make(chan struct{})}
}

func (g *holdGate) gate() pigeon.Gate {
	return pigeon.GateFunc("hold", func(context.Context, *pigeon.Admission) pigeon.Verdict {
		if g.quarantining.Load() {
			return pigeon.Quarantine(pigeon.CodePolicyDenied, "kept for review")
		}
		if g.holding.Load() && g.held.CompareAndSwap(false, true) {
			close(g.entered)
			<-g.release
		}
		return pigeon.Allow()
	})
}

// waitFor receives from ch, failing the test after 30 s.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen", what)
		panic("unreachable")
	}
}

// acceptances maps the message id of every publish.accepted record of
// recs to its Seqs.
func acceptances(recs []pigeon.AuditRecord) map[string]string {
	out := map[string]string{}
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) {
			out[r.MessageID] = r.Seqs
		}
	}
	return out
}

// TestShutdownWaitsForAcceptanceInFlight: an operation that admits a
// message (a publish, a batch, a quarantine release) and is still judging
// it when Shutdown begins holds Shutdown until it has answered, so that
// the message it answers accepted has its publish.accepted record in the
// store, written by Shutdown's last flush, and the chain verifies; what
// the operation would admit after Shutdown began is refused
// SHUTTING_DOWN. Before Shutdown waited for operations in flight, it
// flushed the audit queue and returned while the gate still held the
// message; the message was then appended and answered accepted, and its
// record, queued after the last flush, never reached the store.
func TestShutdownWaitsForAcceptanceInFlight(t *testing.T) {
	for _, tt := range []struct {
		name string
		// op runs the operation under test, off the test's goroutine: it
		// returns the id of the message answered accepted, or why not.
		op func(e *pigeon.Engine, c pigeon.Caller, prep string) (string, error)
		// prepare readies it before the gate holds (a quarantine release:
		// the record released).
		prepare func(t *testing.T, e *pigeon.Engine, c pigeon.Caller, g *holdGate) string
	}{
		{name: "publish", op: func(e *pigeon.Engine, c pigeon.Caller, _ string) (string, error) {
			res, err := e.Publish(ctx, c, demo.Payment("o-held"))
			if err != nil {
				return "", err
			}
			return res.Message.ID, nil
		}},
		{name: "batch", op: func(e *pigeon.Engine, c pigeon.Caller, _ string) (string, error) {
			out := e.PublishBatch(ctx, c, []*pigeon.Message{demo.Payment("o-held"), demo.Payment("o-late")})
			if out[0].Err != nil {
				return "", out[0].Err
			}
			if pigeon.ErrorCode(out[1].Err) != pigeon.CodeShutdown {
				return "", fmt.Errorf("the message after Shutdown began was answered %v, not SHUTTING_DOWN", out[1].Err)
			}
			return out[0].Result.Message.ID, nil
		}},
		{name: "quarantine release", prepare: func(t *testing.T, e *pigeon.Engine, c pigeon.Caller, g *holdGate) string {
			g.quarantining.Store(true)
			defer g.quarantining.Store(false)
			_, err := e.Publish(ctx, c, demo.Payment("o-kept"))
			pe := requireCode(t, err, pigeon.CodePolicyDenied)
			return pe.Details["quarantineId"].(string)
		}, op: func(e *pigeon.Engine, c pigeon.Caller, id string) (string, error) {
			res, err := e.ReleaseQuarantine(ctx, c, id)
			if err != nil {
				return "", err
			}
			return res.Message.ID, nil
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.New(nil) // the application's: readable after Shutdown
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			g := newHoldGate()
			e, err := pigeon.New(ctx, &pigeon.Options{
				Store:         st,
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       demo.Catalog(),
				Region:        "uk",
				Gates:         []pigeon.Gate{g.gate()},
			})
			require.NoError(t, err)
			shut := false
			t.Cleanup(func() {
				if !shut {
					_ = e.Shutdown(context.Background())
				}
			})
			t.Cleanup(g.free) // first, should the test fail while the gate holds
			s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			c := callerOf(s)
			var prep string
			if tt.prepare != nil {
				prep = tt.prepare(t, e, c, g)
			}

			g.holding.Store(true)
			type opAnswer struct {
				id  string
				err error
			}
			accepted := make(chan opAnswer, 1)
			go func() {
				id, err := tt.op(e, c, prep)
				accepted <- opAnswer{id, err}
			}()
			waitFor(t, g.entered, "the gate's hold")
			shutdown := make(chan error, 1)
			go func() { shutdown <- e.Shutdown(context.Background()) }()
			require.Eventually(t, func() bool {
				_, err := e.Message(ctx, c, "msg_probe")
				return pigeon.ErrorCode(err) == pigeon.CodeShutdown
			}, 30*time.Second, time.Millisecond, "Shutdown began")
			g.free()
			got := waitFor(t, accepted, "the operation's answer")
			require.NoError(t, got.err, "the operation admitted before Shutdown began is answered accepted")
			id := got.id
			require.NoError(t, waitFor(t, shutdown, "Shutdown's return"))
			shut = true

			recs, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			seqs := acceptances(recs)
			require.Contains(t, seqs, id, "the message answered accepted has its publish.accepted record in the store")
			held, err := st.Lookup(ctx, id)
			require.NoError(t, err)
			require.Equal(t, strconv.FormatUint(held.Seq, 10), seqs[id])
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
		})
	}
}

// TestShutdownWhilePublishing: publishers, one message at a time and in
// batches, publish while Shutdown runs, on the memory store and on the
// WAL store. Afterwards every message answered accepted has its
// publish.accepted record (naming its sequence) in the store's audit log,
// read back from the store (the WAL store opened again), no message has
// one that was not answered accepted, every other answer is
// SHUTTING_DOWN, and the chain verifies as `pigeon audit verify` checks
// it.
func TestShutdownWhilePublishing(t *testing.T) {
	type opened struct {
		st store.Store
		// readBack closes what is open and returns the audit log as
		// stored, having verified its chain.
		readBack func(t *testing.T) []pigeon.AuditRecord
	}
	for _, tt := range []struct {
		name string
		open func(t *testing.T) opened
	}{
		{name: "memory", open: func(t *testing.T) opened {
			st := memory.New(nil)
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			return opened{st: st, readBack: func(t *testing.T) []pigeon.AuditRecord {
				_, err := store.VerifyAudit(ctx, st)
				require.NoError(t, err)
				recs, err := st.ReadAudit(ctx, 0, 0)
				require.NoError(t, err)
				return recs
			}}
		}},
		{name: "wal", open: func(t *testing.T) opened {
			dir := t.TempDir()
			st, err := wal.Open(dir, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close(context.Background()) }) // should the test fail before readBack
			return opened{st: st, readBack: func(t *testing.T) []pigeon.AuditRecord {
				require.NoError(t, st.Close(context.Background()))
				n := 0
				require.NoError(t, wal.ScanAudit(dir, func(*pigeon.AuditRecord) error { n++; return nil }))
				again, err := wal.Open(dir, nil)
				require.NoError(t, err)
				defer func() { require.NoError(t, again.Close(context.Background())) }()
				recs, err := again.ReadAudit(ctx, 0, 0)
				require.NoError(t, err)
				require.Len(t, recs, n)
				return recs
			}}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.open(t)
			e, err := pigeon.New(ctx, &pigeon.Options{
				Store:         o.st,
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       demo.Catalog(),
				Region:        "uk",
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Shutdown(context.Background()) }) // should the test fail before Shutdown
			s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			c := callerOf(s)

			const publishers = 8
			var (
				mu       sync.Mutex
				accepted = map[string]uint64{} // id -> sequence
				refused  []error
				count    atomic.Int64
				wg       sync.WaitGroup
			)
			answer := func(res *pigeon.Result, err error) bool {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return false
				}
				accepted[res.Message.ID] = res.Message.Sequence
				count.Add(1)
				return true
			}
			for p := range publishers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						if p%2 == 0 {
							res, err := e.Publish(ctx, c, demo.Payment("o-"+strconv.Itoa(p)+"-"+strconv.Itoa(i)))
							if !answer(res, err) {
								return
							}
							continue
						}
						msgs := make([]*pigeon.Message, 4)
						for j := range msgs {
							msgs[j] = demo.Payment("b-" + strconv.Itoa(p) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(j))
						}
						done := false
						for _, out := range e.PublishBatch(ctx, c, msgs) {
							if !answer(out.Result, out.Err) {
								done = true
							}
						}
						if done {
							return
						}
					}
				}()
			}
			require.Eventually(t, func() bool { return count.Load() >= 200 }, 30*time.Second, time.Millisecond)
			require.NoError(t, e.Shutdown(context.Background()))
			wg.Wait()

			for _, err := range refused {
				var pe *pigeon.Error
				require.True(t, errors.As(err, &pe), "a typed refusal: %v", err)
				require.Equal(t, pigeon.CodeShutdown, pe.Code, "%v", err)
			}
			seqs := acceptances(o.readBack(t))
			var missing, wrong []string
			for id, seq := range accepted {
				got, ok := seqs[id]
				switch {
				case !ok:
					missing = append(missing, id)
				case got != strconv.FormatUint(seq, 10):
					wrong = append(wrong, id+" at "+got)
				}
			}
			require.Empty(t, missing, "messages answered accepted (of %d) without their publish.accepted record", len(accepted))
			require.Empty(t, wrong, "records naming another sequence than the answer")
			require.Len(t, seqs, len(accepted), "no record of a message not answered accepted")
		})
	}
}

// holdObserver is an Observer that, once armed with an event, keeps the
// operation that queues the first record of it (entered tells when)
// until release is closed: the moment between the operation's decision
// and its record's place in the audit queue.
type holdObserver struct {
	event            atomic.Pointer[pigeon.Event]
	held             atomic.Bool
	entered, release chan struct{}
	freed            sync.Once
}

// free lets the operation held go on; it may be called more than once.
func (o *holdObserver) free() { o.freed.Do(func() { close(o.release) }) }

func (o *holdObserver) Audited(r pigeon.AuditRecord) {
	if ev := o.event.Load(); ev != nil && r.Type == string(*ev) && o.held.CompareAndSwap(false, true) {
		close(o.entered)
		<-o.release
	}
}

func (o *holdObserver) Took(pigeon.Stage, string, time.Duration)       {}
func (o *holdObserver) Committed(pigeon.CommitLog, int, time.Duration) {}
func (o *holdObserver) Noted(pigeon.Note, string)                      {}

// TestShutdownWaitsForDeliveryRecordsInFlight: an operation that hands a
// message over (a pull receive, a reply handed to its requester) and
// records it with a record it does not wait for holds Shutdown until its
// record is queued, so that Shutdown's last flush writes it: the message
// is never handed over without its delivery.dispatched or
// reply.delivered record in the store. Before Shutdown waited for
// operations in flight, it flushed and returned first, and the record,
// queued after, never reached the store.
func TestShutdownWaitsForDeliveryRecordsInFlight(t *testing.T) {
	for _, tt := range []struct {
		name  string
		event pigeon.Event
		// start begins the operation under test; what it hands over comes
		// on the channel: the message's id and the ref its record has.
		start func(t *testing.T, e *pigeon.Engine, checkout, gateway pigeon.Session) <-chan handedOver
	}{
		{name: "pull receive", event: pigeon.EventDeliveryDispatched, start: func(t *testing.T, e *pigeon.Engine, checkout, gateway pigeon.Session) <-chan handedOver {
			_, err := checkout.Publish(ctx, demo.Payment("o-1"))
			require.NoError(t, err)
			out := make(chan handedOver, 1)
			go func() {
				got, err := gateway.Receive(ctx, "payments.authorize", 1)
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("received %d messages, not 1", len(got))
				}
				if err != nil {
					out <- handedOver{err: err}
					return
				}
				out <- handedOver{id: got[0].ID}
			}()
			return out
		}},
		{name: "reply", event: pigeon.EventReplyDelivered, start: func(t *testing.T, e *pigeon.Engine, checkout, gateway pigeon.Session) <-chan handedOver {
			req := demo.Payment("o-1")
			req.ID = pigeon.NewMessageID()
			out := make(chan handedOver, 1)
			go func() {
				r, err := checkout.Request(ctx, req)
				if err != nil {
					out <- handedOver{err: err}
					return
				}
				out <- handedOver{id: r.ID, ref: req.ID}
			}()
			var got []*pigeon.Message
			require.Eventually(t, func() bool {
				var err error
				got, err = gateway.Receive(ctx, "payments.authorize", 1)
				require.NoError(t, err)
				return len(got) == 1
			}, 30*time.Second, time.Millisecond, "the request is stored")
			_, err := gateway.Publish(ctx, demo.Approval(got[0].ID))
			require.NoError(t, err)
			return out
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.New(nil)
			t.Cleanup(func() { _ = st.Close(context.Background()) })
			o := &holdObserver{entered: make(chan struct{}), release: make(chan struct{})}
			e, err := pigeon.New(ctx, &pigeon.Options{
				Store:         st,
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       demo.Catalog(),
				Region:        "uk",
				Observer:      o,
			})
			require.NoError(t, err)
			shut := false
			t.Cleanup(func() {
				if !shut {
					_ = e.Shutdown(context.Background())
				}
			})
			t.Cleanup(o.free) // first, should the test fail while the observer holds
			checkout, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			gateway, err := e.Connect(ctx, "gateway-token", []string{"payments.authorize"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)

			ev := tt.event
			o.event.Store(&ev)
			handed := tt.start(t, e, checkout, gateway)
			waitFor(t, o.entered, "the record's hold")
			shutdown := make(chan error, 1)
			go func() { shutdown <- e.Shutdown(context.Background()) }()
			require.Eventually(t, func() bool {
				_, err := e.Message(ctx, callerOf(checkout), "msg_probe")
				return pigeon.ErrorCode(err) == pigeon.CodeShutdown
			}, 30*time.Second, time.Millisecond, "Shutdown began")
			o.free()
			got := waitFor(t, handed, "the operation's answer")
			require.NoError(t, got.err, "the operation begun before Shutdown hands its message over")
			require.NoError(t, waitFor(t, shutdown, "Shutdown's return"))
			shut = true

			recs, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			found := false
			for _, r := range recs {
				found = found || (r.Type == string(ev) && r.MessageID == got.id && r.Ref == got.ref)
			}
			require.True(t, found, "the message handed over has its %s record in the store", ev)
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
		})
	}
}

// handedOver is what an operation handed over: the message's id and the
// Ref of its record, or why it did not.
type handedOver struct {
	id, ref string
	err     error
}
