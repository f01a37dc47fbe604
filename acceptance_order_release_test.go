package pigeon_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
)

// set makes before run first in each Append (appendHooks).
func (s *appendHooks) set(before func() error) { s.before.Store(&before) }

// within runs fn, or fails the test when fn has not returned within a
// generous deadline: it waits behind an acceptance's place in the audit
// queue that nobody fills.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		require.FailNow(t, what+" did not return: it waits behind an acceptance's place that is never filled")
	}
}

// TestAcceptancePlaceDroppedWhenTheAppendDoesNotAccept: the engine
// reserves the acceptance's place in the audit queue before the append
// of a store it does not know; when the append fails, finds a duplicate
// or panics, the place is given up, and a record queued behind it (here
// one whose caller waits for its write) is written. Were the place left
// open, that caller, and every later one, would wait for ever.
func TestAcceptancePlaceDroppedWhenTheAppendDoesNotAccept(t *testing.T) {
	refused := errors.New("the store refuses")
	for _, tc := range []struct {
		name string
		arm  func(st *appendHooks)
		want string // the publish's outcome
	}{
		{"error", func(st *appendHooks) { st.set(func() error { return refused }) }, "refused"},
		{"panic", func(st *appendHooks) { st.set(func() error { panic("the store panics") }) }, "panicked"},
		{"duplicate", func(*appendHooks) {}, "duplicate"}, // the same idempotency key again
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &appendHooks{Store: memory.New(nil)}
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			e := f.e
			// Not closed before the engine's Shutdown, which gives up
			// any place still open: a place left open fails the test
			// below rather than hang its end.
			pub, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
			require.NoError(t, err)
			_, err = pub.Publish(ctx, demo.Notification("k-1"))
			require.NoError(t, err)

			tc.arm(st)
			var got string
			within(t, "the publish", func() {
				defer func() {
					if recover() != nil {
						got = "panicked"
					}
				}()
				res, err := pub.Publish(ctx, demo.Notification("k-1"))
				switch {
				case err != nil:
					got = "refused"
				case res.Status == pigeon.StatusDuplicate:
					got = "duplicate"
				default:
					got = "accepted"
				}
			})
			require.Equal(t, tc.want, got)
			st.before.Store(nil)

			within(t, "a record written with its caller waiting", func() {
				err = e.Record(ctx, pigeon.EventProgramDeployed, pigeon.CodeOK, pigeon.AuditRecord{Ref: "after the place"})
			})
			require.NoError(t, err)
			recs, err := e.Audit(ctx, 1, 1000)
			require.NoError(t, err)
			require.Equal(t, "after the place", recs[len(recs)-1].Ref)
			accepted := 0
			for _, r := range recs {
				if r.Type == string(pigeon.EventPublishAccepted) {
					accepted++
				}
			}
			require.Equal(t, 1, accepted, "the refused publish left no acceptance")
			_, err = e.VerifyAudit(ctx)
			require.NoError(t, err)
		})
	}
}

// TestShutdownReleasesAcceptancePlaces: a publish is held in the append
// of a store that does not answer (and does not heed its context) when
// Shutdown begins. Shutdown gives up the acceptance's place, so the
// subscription it ends writes its subscription.stopped record (its
// caller waits for that write), and Shutdown, which waits for the
// publish in flight, returns its context's error once that is done
// rather than wait for an append its context does not bound. Once the
// append answers, the publish is answered too, and a later Shutdown
// finishes: the acceptance's record, queued after the place was given
// up, is written by its last flush.
func TestShutdownReleasesAcceptancePlaces(t *testing.T) {
	st := &appendHooks{Store: memory.New(nil)}
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	e := f.e
	pub := f.connect("orders-token", "notifications.send")
	worker := f.connect("notifier-token", "notifications.send")
	_, err := worker.Subscribe(ctx, "notifications.send", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)

	entered, answer := make(chan struct{}), make(chan struct{})
	var answered sync.Once
	t.Cleanup(func() { answered.Do(func() { close(answer) }) }) // first, should the test fail
	st.set(func() error {
		close(entered)
		<-answer
		return nil
	})
	type publishAnswer struct {
		res *pigeon.Result
		err error
	}
	published := make(chan publishAnswer, 1)
	go func() {
		res, err := pub.Publish(ctx, demo.Notification("k-1"))
		published <- publishAnswer{res, err}
	}()
	<-entered

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	var shutErr error
	within(t, "Shutdown with its context done", func() { shutErr = e.Shutdown(cancelled) })
	require.ErrorIs(t, shutErr, context.Canceled, "Shutdown does not wait for the append past its context")
	require.Eventually(t, func() bool {
		recs, err := st.ReadAudit(ctx, 1, 1000)
		require.NoError(t, err)
		return len(recs) > 0 && recs[len(recs)-1].Type == string(pigeon.EventSubscriptionStopped)
	}, 30*time.Second, time.Millisecond, "the subscription's end is written")

	answered.Do(func() { close(answer) })
	got := <-published
	require.NoError(t, got.err, "admitted before Shutdown began, it is answered")
	require.NoError(t, e.Shutdown(ctx))
	require.NoError(t, e.Shutdown(ctx), "idempotent")
	recs, err := st.ReadAudit(ctx, 1, 1000)
	require.NoError(t, err)
	var accepted []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) {
			accepted = append(accepted, r)
		}
	}
	require.Len(t, accepted, 1, "the acceptance is written by the Shutdown that finished")
	require.Equal(t, got.res.Message.ID, accepted[0].MessageID)
	_, err = pub.Publish(ctx, demo.Notification("k-2"))
	requireCode(t, err, pigeon.CodeShutdown)
}
