package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/transport/transporttest"
)

// panickyObserver panics in its method named on, on every call (Took:
// of stage, when stage is set), quoting a card number; its other methods
// do nothing.
type panickyObserver struct {
	on    string
	stage pigeon.Stage
}

func (o panickyObserver) explode(method string) {
	if method == o.on {
		panic("observer " + method + " exploded, card 4111111111111111")
	}
}

func (o panickyObserver) Audited(pigeon.AuditRecord) { o.explode("Audited") }
func (o panickyObserver) Took(s pigeon.Stage, _ string, _ time.Duration) {
	if o.stage == "" || s == o.stage {
		o.explode("Took")
	}
}
func (o panickyObserver) Committed(pigeon.CommitLog, int, time.Duration) { o.explode("Committed") }
func (o panickyObserver) Noted(pigeon.Note, string)                      { o.explode("Noted") }

// TestObserverPanicChangesNothing: an application's Observer that panics,
// in any of its methods and on every call, changes no outcome: a refused
// credential is refused, publishes and requests are answered, every kind
// of delivery (a synchronous handler on the delivery loop or on its own
// goroutine, an asynchronous one, a redelivery, a work queue's) is settled
// as its handler said, subscriptions end when asked, and Shutdown
// returns. The panic is logged, card numbers redacted. Before, a panic of
// Took after a delivery left it unsettled, so its subscription's end
// waited for it for ever (a WebSocket connection's teardown with it),
// and one on a publish, a request, a redelivery's goroutine or the audit
// writer reached the caller or ended the process.
func TestObserverPanicChangesNothing(t *testing.T) {
	for _, obs := range []panickyObserver{
		{on: "Audited"}, {on: "Took"}, {on: "Took", stage: pigeon.StageDeliver}, {on: "Committed"}, {on: "Noted"},
	} {
		name := obs.on
		if obs.stage != "" {
			name += " of " + string(obs.stage)
		}
		t.Run(name, func(t *testing.T) {
			logs := &testlog.Buffer{}
			opts := transporttest.Options()
			opts.RetryBase = time.Millisecond
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
			opts.Observer = obs
			e, err := pigeon.New(context.Background(), opts)
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, e.Shutdown(ctx), "Shutdown returns")
			})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// A refused credential (noted) is refused as ever.
			_, err = e.Connect(ctx, "no-such-token", []string{"chat.messages"})
			require.Error(t, err)
			var pe *pigeon.Error
			require.ErrorAs(t, err, &pe)
			require.NotEqual(t, pigeon.CodeInternal, pe.Code)

			pub := chatSession(t, e, "alice-token", "chat.messages")
			caller := callerFor(t, e, "bob-token", "chat.messages")
			// Each handler fails the first attempt (a redelivery follows,
			// noted) and takes the second.
			type got struct {
				kind    string
				attempt int
			}
			deliveries := make(chan got, 64)
			syncHandler := func(kind string) pigeon.Handler {
				return func(_ context.Context, d *pigeon.Delivery) error {
					deliveries <- got{kind, d.Attempt}
					if d.Attempt == 1 {
						return errors.New("once more")
					}
					return nil
				}
			}
			var subs []pigeon.Subscription
			onLoop, err := e.Subscribe(ctx, caller, "chat.messages", syncHandler("on the loop"))
			require.NoError(t, err)
			ownGoroutine, err := e.Subscribe(ctx, caller, "chat.messages", syncHandler("own goroutine"), pigeon.WithMaxInFlight(4))
			require.NoError(t, err)
			async, err := e.SubscribeAsync(ctx, caller, "chat.messages", func(_ context.Context, d *pigeon.Delivery, done func(error)) {
				deliveries <- got{"async", d.Attempt}
				if d.Attempt == 1 {
					done(errors.New("once more"))
					return
				}
				done(nil)
			})
			require.NoError(t, err)
			subs = append(subs, onLoop, ownGoroutine, async)

			_, err = pub.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"kind":"chat","text":"hello"}`)})
			require.NoError(t, err, "the publish is answered")
			want := map[got]bool{}
			for _, kind := range []string{"on the loop", "own goroutine", "async"} {
				want[got{kind, 1}], want[got{kind, 2}] = true, true
			}
			for len(want) > 0 {
				select {
				case g := <-deliveries:
					require.True(t, want[g], "delivered once each: %+v", g)
					delete(want, g)
				case <-ctx.Done():
					t.Fatalf("deliveries not made: %v", want)
				}
			}
			for _, s := range subs {
				require.NoError(t, s.Unsubscribe(ctx), "the subscription ends")
				require.NoError(t, s.Err(), "no delivery failed on the broker's side")
			}
			select {
			case g := <-deliveries:
				t.Fatalf("a settled delivery came again: %+v", g)
			default:
			}

			// A work queue's delivery is settled: nothing left in flight
			// nor to do.
			boss := chatSession(t, e, "boss-token", "jobs.run")
			crew := callerFor(t, e, "crew-token", "jobs.run")
			jobs := make(chan struct{}, 4)
			worker, err := e.SubscribeAsync(ctx, crew, "jobs.run", func(_ context.Context, _ *pigeon.Delivery, done func(error)) {
				done(nil)
				jobs <- struct{}{}
			})
			require.NoError(t, err)
			_, err = boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"kind":"build"}`)})
			require.NoError(t, err)
			select {
			case <-jobs:
			case <-ctx.Done():
				t.Fatal("the job was not delivered")
			}
			require.NoError(t, worker.Unsubscribe(ctx), "the worker's subscription ends")
			st, err := e.Stats(ctx)
			require.NoError(t, err)
			var found bool
			for _, g := range st.Groups {
				if g.Subject == "jobs.run" {
					found = true
					require.Zero(t, g.InFlight, "no lease held")
					require.Zero(t, g.Lag, "the job is done")
				}
			}
			require.True(t, found, "the group is listed")

			require.Contains(t, logs.String(), "an observer panicked")
			require.Contains(t, logs.String(), "[REDACTED]")
			require.NotContains(t, logs.String(), "4111111111111111")
		})
	}
}
