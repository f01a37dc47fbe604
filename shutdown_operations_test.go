package pigeon_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// engineGoroutines lists the goroutines the engine started (goTracked)
// that are still running.
func engineGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "pigeon.(*Engine).goTracked") {
			out = append(out, g)
		}
	}
	return out
}

// TestShutdownRacingSessionsAndSubscriptions: sessions (renewed in the
// background), subscriptions, handlers and audit walks are begun, one
// after another, by several goroutines while Shutdown runs, again and
// again. Shutdown returns without a panic, no goroutine of the engine's
// runs once it has returned, and nothing is written to the store after
// it: each call either finished before Shutdown's last flush or was
// refused SHUTTING_DOWN. Before, these calls were not counted in flight,
// and a goroutine one of them started (a subscription's loop, a
// session's renewals) could be added to Shutdown's sync.WaitGroup while
// Shutdown waited on it, which the WaitGroup forbids: it could panic, or
// start after the wait, and write its records after Shutdown returned.
func TestShutdownRacingSessionsAndSubscriptions(t *testing.T) {
	handler := func(context.Context, *pigeon.Delivery) error { return nil }
	for range 100 {
		st := memory.New(nil)
		e, err := pigeon.New(ctx, &pigeon.Options{
			Store:         st,
			Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
			Catalog:       demo.Catalog(),
			Region:        "uk",
			NegotiateRate: pigeon.RateLimitPolicy{PerSecond: -1},
		})
		require.NoError(t, err)
		worker, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"}, pigeon.WithoutAutoRenew())
		require.NoError(t, err)

		// Each starts one kind of call until it is refused SHUTTING_DOWN.
		calls := []func() error{
			func() error {
				sub, err := worker.Subscribe(ctx, "notifications.send", handler)
				if err == nil {
					err = sub.Unsubscribe(ctx)
				}
				return err
			},
			func() error {
				s, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"})
				if err == nil {
					err = s.Close(ctx)
				}
				return err
			},
			func() error {
				sub, err := e.Handle(ctx, "notifier-token", "notifications.send", handler)
				if err == nil {
					err = sub.Unsubscribe(ctx)
				}
				return err
			},
			func() error {
				_, err := e.VerifyAudit(ctx)
				return err
			},
		}
		var (
			wg      sync.WaitGroup
			started atomic.Int64
			mu      sync.Mutex
			other   []error
		)
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					err := call()
					started.Add(1)
					if pigeon.ErrorCode(err) == pigeon.CodeShutdown {
						return
					}
					if err != nil {
						mu.Lock()
						other = append(other, err)
						mu.Unlock()
					}
				}
			}()
		}
		require.Eventually(t, func() bool { return started.Load() >= int64(8*len(calls)) }, 30*time.Second, time.Millisecond)
		require.NoError(t, e.Shutdown(ctx))
		written, err := st.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(engineGoroutines()) == 0 }, 10*time.Second, time.Millisecond,
			"no goroutine of the engine's runs once Shutdown returned")
		wg.Wait()

		after, err := st.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		require.Equal(t, len(written), len(after), "nothing is written after Shutdown returned: %v", after[min(len(written), len(after)):])
		_, err = store.VerifyAudit(ctx, st)
		require.NoError(t, err)
		require.Empty(t, other, "every call ends in success or SHUTTING_DOWN")
		require.NoError(t, st.Close(ctx))
	}
}

// TestOperationsRefusedAfterShutdown: once Shutdown has begun, a purge,
// a catalog change, a negotiation or renewal, a subscription and an
// audit walk are refused SHUTTING_DOWN, and neither change nor record
// anything. Before, they went on after Shutdown returned: a purge
// refused wrote its purge.denied record, a subject replaced changed the
// catalog and wrote subject.registered. A change that only takes access
// away (a contract's revocation) is not refused while the store is open
// (TestRevocationsGoOnDuringShutdown).
func TestOperationsRefusedAfterShutdown(t *testing.T) {
	for _, tt := range []struct {
		name string
		op   func(e *pigeon.Engine, s pigeon.Session) error
	}{
		{name: "purge", op: func(e *pigeon.Engine, s pigeon.Session) error {
			_, err := e.PurgeSubject(ctx, callerOf(s).Principal, "")
			return err
		}},
		{name: "replace subject", op: func(e *pigeon.Engine, _ pigeon.Session) error {
			p, err := e.Subject("notifications.send")
			if err != nil {
				return err
			}
			p.Version = "v-after-shutdown"
			return e.ReplaceSubject(ctx, p)
		}},
		{name: "negotiate", op: func(e *pigeon.Engine, s pigeon.Session) error {
			_, err := e.Negotiate(ctx, callerOf(s).Principal, "", []string{"notifications.send"}, 0)
			return err
		}},
		{name: "renew contract", op: func(e *pigeon.Engine, s pigeon.Session) error {
			_, err := e.RenewContract(ctx, callerOf(s).Principal, s.Contract().ID(), 0)
			return err
		}},
		{name: "subscribe", op: func(_ *pigeon.Engine, s pigeon.Session) error {
			_, err := s.Subscribe(ctx, "notifications.send", func(context.Context, *pigeon.Delivery) error { return nil })
			return err
		}},
		{name: "handle", op: func(e *pigeon.Engine, _ pigeon.Session) error {
			_, err := e.Handle(ctx, "notifier-token", "notifications.send", func(context.Context, *pigeon.Delivery) error { return nil })
			return err
		}},
		{name: "verify audit", op: func(e *pigeon.Engine, _ pigeon.Session) error {
			_, err := e.VerifyAudit(ctx)
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := memory.New(nil)
			t.Cleanup(func() { _ = st.Close(ctx) })
			e, err := pigeon.New(ctx, &pigeon.Options{
				Store:         st,
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       demo.Catalog(),
				Region:        "uk",
			})
			require.NoError(t, err)
			s, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			before := e.Catalog()
			require.NoError(t, e.Shutdown(ctx))
			written, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)

			requireCode(t, tt.op(e, s), pigeon.CodeShutdown)
			after, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			require.Equal(t, len(written), len(after), "nothing is recorded: %v", after[min(len(written), len(after)):])
			require.Equal(t, before, e.Catalog(), "the catalog is as it was")
			c, err := st.GetContract(ctx, s.Contract().ID())
			require.NoError(t, err)
			require.False(t, c.Revoked, "the contract is as it was")
		})
	}
}

// TestRefusalsRecordedAfterShutdown: a refusal recorded after Shutdown
// returned (a server's access.denied through Engine.Record, a
// transport's Recheck of a contract it no longer finds) is written, each
// one, to the application's store; on the store the engine made, which
// Shutdown closed, Record answers the write's failure, SHUTTING_DOWN,
// every time, and a record written without waiting is logged as lost.
// Before, the refusals after the first were counted in a run of
// refusals that no flush would write, Record answering nil, and a
// record queued without waiting stayed in the queue, with no writer.
func TestRefusalsRecordedAfterShutdown(t *testing.T) {
	for _, owned := range []bool{false, true} {
		name := "application's store"
		if owned {
			name = "engine's store"
		}
		t.Run(name, func(t *testing.T) {
			logs := &testlog.Buffer{}
			o := &pigeon.Options{
				Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
				Catalog:       demo.Catalog(),
				Region:        "uk",
				Logger:        logs.Logger(),
			}
			var st *memory.Store
			if !owned {
				st = memory.New(nil)
				t.Cleanup(func() { _ = st.Close(ctx) })
				o.Store = st
			}
			e, err := pigeon.New(ctx, o)
			require.NoError(t, err)
			s, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"}, pigeon.WithoutAutoRenew())
			require.NoError(t, err)
			require.NoError(t, e.Shutdown(ctx))

			for range 3 {
				err := e.Record(ctx, pigeon.EventAccessDenied, pigeon.CodeForbidden, pigeon.AuditRecord{Principal: demo.Notifier, Ref: "GET /v1/audit"})
				if owned {
					requireCode(t, err, pigeon.CodeShutdown)
				} else {
					require.NoError(t, err)
				}
			}
			gone := callerOf(s)
			gone.ContractID = "ctr_unknown"
			for range 2 {
				require.Error(t, e.Recheck(ctx, gone, "notifications.send", pigeon.OpReceive))
			}
			if owned {
				require.Contains(t, logs.String(), "could not be written", "the records written without waiting are logged as lost")
				return
			}
			recs, err := st.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			count := map[string]int{}
			for _, r := range recs {
				if r.Type == string(pigeon.EventAccessDenied) || r.Type == string(pigeon.EventReceiveDenied) {
					require.NotContains(t, r.Ref, "coalesced:", "each refusal after Shutdown is written as it came")
					count[r.Type]++
				}
			}
			require.Equal(t, map[string]int{string(pigeon.EventAccessDenied): 3, string(pigeon.EventReceiveDenied): 2}, count)
			_, err = store.VerifyAudit(ctx, st)
			require.NoError(t, err)
		})
	}
}
