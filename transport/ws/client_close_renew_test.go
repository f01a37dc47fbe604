package ws_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// hangingNegotiateServer answers the first connection's negotiate and
// leaves every later connection's unanswered; each such negotiate is
// signalled on the returned channel.
func hangingNegotiateServer(t *testing.T) (url string, hung <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 8)
	var conns atomic.Int64
	url = rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		if conns.Add(1) == 1 {
			if negotiated(ctx, c) {
				for readFrame(ctx, c) != nil {
				}
			}
			return
		}
		if f := readFrame(ctx, c); f != nil && f.Op == ws.OpNegotiate {
			ch <- struct{}{}
		}
		for readFrame(ctx, c) != nil { // never answers
		}
	})
	return url, ch
}

// A Reconnect whose negotiation the server never answered, with a context
// without deadline, held the lock Close and every other Reconnect took
// without a context: Close(ctx) and Reconnect(ctx) waited for ever,
// whatever their context. Close now ends the Reconnect in flight (its
// calls fail SESSION_CLOSED at once), and a Reconnect waiting for another
// gives up when its context ends.
func TestCloseEndsAReconnectInFlight(t *testing.T) {
	t.Run("Close", func(t *testing.T) {
		url, hung := hangingNegotiateServer(t)
		s := dialChat(t, url)
		reconnected := make(chan error, 1)
		go func() { reconnected <- s.Reconnect(context.Background()) }()
		<-hung
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			require.NoError(t, s.Close(context.Background()))
		}()
		within(t, closed, "Close while a Reconnect waits for its negotiation")
		var err error
		within(t, chanDone(reconnected, &err), "the Reconnect in flight")
		requireCodeOf(t, err, pigeon.CodeSessionClosed)
	})
	t.Run("Reconnect", func(t *testing.T) {
		url, hung := hangingNegotiateServer(t)
		s := dialChat(t, url)
		reconnected := make(chan error, 1)
		go func() { reconnected <- s.Reconnect(context.Background()) }()
		<-hung
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		second := make(chan error, 1)
		go func() { second <- s.Reconnect(ctx) }()
		var err error
		within(t, chanDone(second, &err), "a Reconnect behind another")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, s.Close(context.Background()))
		within(t, chanDone(reconnected, &err), "the Reconnect in flight")
	})
}

// chanDone is closed once ch yields, its value stored in v.
func chanDone[T any](ch <-chan T, v *T) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		*v = <-ch
		close(done)
	}()
	return done
}

// A handler that ignores its context held Close(ctx) for ever: Close gave
// up on the handler when ctx ended, then waited for the session's
// goroutines (the handler's among them) without ctx. Close now returns
// ctx's error when ctx ends; the subscription and the connection are
// ended all the same, and the rest of the teardown finishes once the
// handler returns (a later Close waits for it, or its own ctx).
func TestCloseHonoursItsContextWithAHandlerThatIgnoresIt(t *testing.T) {
	srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return []string{subscribedFrame(f, "s1"), deliverSeq("s1", "1", 1)}
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	})
	s := srv.dial(t)
	entered, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	sub, err := s.Subscribe(context.Background(), "chat.messages", func(context.Context, *pigeon.Delivery) error {
		close(entered)
		<-release // ignores its context
		return nil
	})
	require.NoError(t, err)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	closed := make(chan struct{})
	var closeErr error
	go func() {
		defer close(closed)
		closeErr = s.Close(ctx)
	}()
	within(t, closed, "Close with a handler that ignores its context")
	require.ErrorIs(t, closeErr, context.DeadlineExceeded)
	within(t, sub.Done(), "the subscription's end")
	within(t, s.Done(), "the connection's end")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, s.Close(ctx2), context.DeadlineExceeded, "a second Close waits for the first's teardown")
}

// A handler of subscription A that unsubscribed subscription B while
// another goroutine's Close waited for A's handler deadlocked (B's
// Unsubscribe waited for B's end, which Close reached only after A's
// handler); so did two handlers unsubscribing each other's subscription
// (each waited for the other's handler). Called from any handler of the
// session, Unsubscribe waits for no handler: the subscription ends once
// its handlers have returned.
func TestAHandlerUnsubscribingAnotherSubscriptionDoesNotDeadlock(t *testing.T) {
	script := func(_ int, f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return []string{subscribedFrame(f, "s"+f.ID), deliverSeq("s"+f.ID, f.ID, 1)}
		case ws.OpNegotiate:
			return nil
		}
		return []string{okFrame(f)}
	}
	t.Run("during Close", func(t *testing.T) {
		srv := newConnServer(t, script)
		ctx := context.Background()
		s := srv.dial(t)
		entered, proceed := make(chan struct{}), make(chan struct{})
		handlerErr := make(chan error, 1)
		var b pigeon.Subscription
		a, err := s.Subscribe(ctx, "chat.messages", func(hctx context.Context, d *pigeon.Delivery) error {
			close(entered)
			<-proceed
			handlerErr <- b.Unsubscribe(hctx)
			return nil
		})
		require.NoError(t, err)
		<-entered
		b, err = s.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
		require.NoError(t, err)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			require.NoError(t, s.Close(ctx))
		}()
		eventually(t, func() bool {
			_, err := s.Receive(ctx, "chat.messages", 1)
			return pigeon.ErrorCode(err) == pigeon.CodeSessionClosed
		}, "Close started")
		close(proceed)
		within(t, closed, "Close waiting for a handler that unsubscribes another subscription")
		require.NoError(t, <-handlerErr)
		within(t, a.Done(), "A's end")
		within(t, b.Done(), "B's end")
	})
	t.Run("each other", func(t *testing.T) {
		srv := newConnServer(t, script)
		ctx := context.Background()
		s := srv.dial(t)
		var (
			subs    [2]pigeon.Subscription
			ready   = make(chan struct{})
			entered sync.WaitGroup
			errs    = make(chan error, 2)
		)
		entered.Add(2)
		for i := range 2 {
			var err error
			subs[i], err = s.Subscribe(ctx, "chat.messages", func(hctx context.Context, d *pigeon.Delivery) error {
				entered.Done()
				<-ready
				entered.Wait() // both handlers run
				errs <- subs[1-i].Unsubscribe(hctx)
				return nil
			})
			require.NoError(t, err)
		}
		close(ready)
		for range 2 {
			var err error
			within(t, chanDone((<-chan error)(errs), &err), "handlers unsubscribing each other")
			require.NoError(t, err)
		}
		within(t, subs[0].Done(), "the first's end")
		within(t, subs[1].Done(), "the second's end")
		require.Len(t, srv.seen(ws.OpUnsubscribe), 2, "the server is told of both")
	})
}

// Acknowledgements the client had decided to send (handlers that
// succeeded) were sent with the context of the Unsubscribe or Close that
// flushed them: one that had ended failed them at once, and the messages
// were redelivered although handled. They are now sent whatever that
// context says, bounded by the connection's write timeout, before the
// unsubscribe and the close.
func TestAcksFlushedWithAnEndedContextAreSent(t *testing.T) {
	for _, name := range []string{"Unsubscribe", "Close"} {
		t.Run(name, func(t *testing.T) {
			srv := newConnServer(t, func(_ int, f *ws.Frame) []string {
				switch f.Op {
				case ws.OpSubscribe:
					return []string{subscribedFrame(f, "s1")}
				case ws.OpNegotiate:
					return nil
				}
				return []string{okFrame(f)}
			})
			s := srv.dial(t)
			sub, err := s.Subscribe(context.Background(), "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
			require.NoError(t, err)
			ws.PendAck(sub, "msg_handled")
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if name == "Unsubscribe" {
				_ = sub.Unsubscribe(ctx)
			} else {
				_ = s.Close(ctx)
			}
			within(t, sub.Done(), "the subscription's end")
			eventually(t, func() bool { return len(srv.seen(ws.OpAck)) == 1 }, "the ack reaches the server")
			var order []string
			srv.mu.Lock()
			for _, f := range srv.frames {
				order = append(order, f.f.Op)
			}
			srv.mu.Unlock()
			ack := slices.Index(order, ws.OpAck)
			if unsub := slices.Index(order, ws.OpUnsubscribe); unsub >= 0 {
				require.Less(t, ack, unsub, "acked before the unsubscribe gives the messages back")
			}
			require.Equal(t, "msg_handled", srv.seen(ws.OpAck)[0].f.MessageID)
		})
	}
}

// renewTimes serves contracts: the negotiate's expires first after now;
// each renew is answered by answer (its frame's id, the previous expiry)
// and its arrival sent on the returned channel.
func renewTimes(t *testing.T, first time.Duration, answer func(re string) []byte) (url string, renews <-chan time.Time) {
	ch := make(chan time.Time, 1024)
	url = rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		for {
			f := readFrame(ctx, c)
			if f == nil {
				return
			}
			var ans []byte
			switch f.Op {
			case ws.OpNegotiate:
				ans = contractAnswer(f.ID, time.Now().Add(first))
			case ws.OpRenew:
				select {
				case ch <- time.Now():
				default:
				}
				ans = answer(f.ID)
			default:
				continue
			}
			if c.Write(ctx, websocket.MessageText, ans) != nil {
				return
			}
		}
	})
	return url, ch
}

// collect gathers what ch yields for d.
func collect(ch <-chan time.Time, d time.Duration) []time.Time {
	var out []time.Time
	end := time.After(d)
	for {
		select {
		case at := <-ch:
			out = append(out, at)
		case <-end:
			return out
		}
	}
}

// The renewal loop's retries were not floored: a server answering every
// renewal with a failure at once made the session try again a quarter of
// the remaining life later, down to 100 ms apart; one answering with a
// contract of another id (which the session does not take) made it
// renew again half the remaining life later, ever closer to the expiry:
// hundreds of renewals in its last milliseconds. Every renewal the loop
// sends, whatever became of the last, is now the floor apart at least (a
// quarter of the contract's negotiated lifetime, between 100 ms and
// 1 s; 500 ms for this 2 s contract); an answer for another contract is
// a failure. A caller's own Renew is its business: not floored.
func TestRenewalRetriesAreFloored(t *testing.T) {
	const life = 2 * time.Second
	const gap = 400 * time.Millisecond // the floor, less the network's jitter
	for name, answer := range map[string]func(re string) []byte{
		"failures": func(re string) []byte {
			return []byte(`{"op":"error","re":"` + re + `","error":{"code":"RATE_LIMITED","message":"slow down"}}`)
		},
		"another contract": func(re string) []byte {
			return []byte(`{"op":"contract","re":"` + re + `","contract":{"id":"ctr_other","principal":"p","subjects":[],"expiresAt":"` +
				time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) + `"}}`)
		},
	} {
		t.Run(name, func(t *testing.T) {
			url, renews := renewTimes(t, life, answer)
			s := dialChat(t, url)
			at := collect(renews, life+life/2)
			require.NotEmpty(t, at, "renewed before the expiry")
			for i := 1; i < len(at); i++ {
				require.GreaterOrEqual(t, at[i].Sub(at[i-1]), gap, "renewal %d of %d", i, len(at))
			}
			t.Logf("%d renewals", len(at))
			if name == "another contract" {
				_, err := s.Renew(context.Background())
				requireCodeOf(t, err, pigeon.CodeInternal)
				require.Equal(t, "ctr_1", s.Contract().ID())
			}
		})
	}
}

// A server whose contracts live under about 4 s without the session
// asking for a lifetime (pigeon.WithContractTTL) had its contract renewed
// once: the floor of 1 s put the next renewal past the expiry, and the
// contract lapsed. The floor is now a quarter of the lifetime the
// negotiation granted, down to 100 ms: such a session stays renewed. A
// server granting contracts shorter still cannot drive renewals faster
// than one per 100 ms.
func TestShortServerContractsStayRenewed(t *testing.T) {
	t.Run("400 ms", func(t *testing.T) {
		const life = 400 * time.Millisecond
		url, renews := renewTimes(t, life, func(re string) []byte { return contractAnswer(re, time.Now().Add(life)) })
		logs := &logCount{}
		s := dialChat(t, url, ws.WithLogger(slog.New(logs)))
		for i := range 6 {
			select {
			case <-renews:
			case <-time.After(5 * time.Second):
				t.Fatalf("renewal %d never came: the contract lapsed", i+1)
			}
		}
		require.Zero(t, logs.count("too short"))
		require.True(t, s.Contract().ExpiresAt().After(time.Now()), "still valid")
	})
	t.Run("hostile 10 ms", func(t *testing.T) {
		url, renews := renewTimes(t, 10*time.Millisecond, func(re string) []byte {
			return contractAnswer(re, time.Now().Add(150*time.Millisecond))
		})
		dialChat(t, url)
		at := collect(renews, time.Second)
		for i := 1; i < len(at); i++ {
			require.GreaterOrEqual(t, at[i].Sub(at[i-1]), 80*time.Millisecond, "renewal %d of %d", i, len(at))
		}
		require.LessOrEqual(t, len(at), 11)
	})
}
