package ws_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

func TestConnectionLimit(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxConnections: 2})
	a := v.raw(t, "alice-token")
	v.raw(t, "bob-token")
	_, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	require.Error(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	_, err = ws.Dial(context.Background(), v.url, "alice-token", []string{"chat.messages"})
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeRateLimited, pe.Code)

	require.NoError(t, a.c.Close(websocket.StatusNormalClosure, ""))
	eventually(t, func() bool { return v.srv.Stats().Open == 1 }, "a slot frees")
	v.raw(t, "alice-token").ok(ws.OpPing, "", ws.OpPong)
}

// TestConnectionLimitPerPrincipal: one principal holds at most
// MaxConnectionsPerPrincipal connections, so it cannot take every slot;
// others still connect, a closed connection frees its slot, and so does
// an authenticated request that never became a WebSocket.
func TestConnectionLimitPerPrincipal(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxConnectionsPerPrincipal: 2})
	auth := http.Header{"Authorization": {"Bearer alice-token"}}
	for range 3 { // not upgrades: each takes a slot for a moment, then gives it back
		req, err := http.NewRequest(http.MethodGet, "http"+strings.TrimPrefix(v.url, "ws"), nil)
		require.NoError(t, err)
		req.Header = auth.Clone()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.NotEqual(t, http.StatusSwitchingProtocols, resp.StatusCode)
	}
	a := v.raw(t, "alice-token")
	v.raw(t, "alice-token")
	_, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{HTTPHeader: auth})
	require.Error(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	v.raw(t, "bob-token").ok(ws.OpPing, "", ws.OpPong) // another principal has its own slots

	require.NoError(t, a.c.Close(websocket.StatusNormalClosure, ""))
	eventually(t, func() bool { return v.srv.Stats().Open == 2 }, "a slot frees")
	v.raw(t, "alice-token").ok(ws.OpPing, "", ws.OpPong)
}

func TestPublishRateLimitPerConnection(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: 0.001, PublishBurst: 2})
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	msg := `,"message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{}}`
	r.ok(ws.OpPublish, msg, ws.OpDecision)
	r.ok(ws.OpPublish, msg, ws.OpDecision)
	r.fail(ws.OpPublish, msg, pigeon.CodeRateLimited)
	r.ok(ws.OpPing, "", ws.OpPong)
	// Another connection has its own budget.
	other := v.raw(t, "alice-token")
	other.negotiate("chat.messages")
	other.ok(ws.OpPublish, msg, ws.OpDecision)
	require.Equal(t, int64(1), v.srv.Stats().RateLimited)
}

// TestSubscriptionCapOverTheWire: a principal's subscriptions are capped
// across its connections (pigeon.Options.MaxSubscriptionsPerPrincipal);
// one more is an error frame TOO_MANY_SUBSCRIPTIONS, the connection stays
// up, and a connection that goes away frees its subscriptions' places.
func TestSubscriptionCapOverTheWire(t *testing.T) {
	v := newEnv(t, nil, func(o *pigeon.Options) { o.MaxSubscriptionsPerPrincipal = 2 })
	a := v.raw(t, "bob-token")
	a.negotiate("chat.messages")
	b := v.raw(t, "bob-token")
	b.negotiate("chat.messages")
	const sub = `,"subject":"chat.messages"`
	a.ok(ws.OpSubscribe, sub, ws.OpSubscribed)
	b.ok(ws.OpSubscribe, sub, ws.OpSubscribed)
	b.fail(ws.OpSubscribe, sub, pigeon.CodeTooManySubscriptions)
	a.fail(ws.OpSubscribe, sub, pigeon.CodeTooManySubscriptions)
	b.ok(ws.OpPing, "", ws.OpPong)

	require.NoError(t, a.c.Close(websocket.StatusNormalClosure, ""))
	c := v.raw(t, "bob-token")
	c.negotiate("chat.messages")
	eventually(t, func() bool {
		f := c.call(ws.OpSubscribe, sub)
		if f.Op == ws.OpError {
			require.Equal(t, pigeon.CodeTooManySubscriptions, f.Error.Code)
			return false
		}
		require.Equal(t, ws.OpSubscribed, f.Op)
		return true
	}, "the closed connection's subscription frees its place")
	c.fail(ws.OpSubscribe, sub, pigeon.CodeTooManySubscriptions)
}

// smallReceiveBuffer makes a client socket whose kernel receive buffer is
// tiny, so that a client that stops reading stalls the server quickly.
func smallReceiveBuffer() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = setReceiveBuffer(fd, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// A consumer that stops reading fills its write queue: the server closes it
// with 1008 after the stall timeout, while the publisher and the other
// subscribers carry on unhindered.
//
// The stall timeout is what closes a connection whose writer is not run
// for that long, so it leaves the live ones two seconds (-race on a busy
// machine can hold a goroutine for hundreds of milliseconds). The publisher
// goes on until the stuck consumer is closed, each message once every
// other subscriber has it: whatever the machine's pace, the stuck queue
// fills, the live ones never do, and the test ends at the stall however
// many messages it took to fill the stuck consumer's socket and queue.
func TestStalledConsumerClosed1008AndOthersUnaffected(t *testing.T) {
	v := newEnv(t, &ws.Options{StallTimeout: 2 * time.Second, WriteQueue: 4})
	ctx := context.Background()
	stuck := v.rawWith(t, &websocket.DialOptions{HTTPClient: smallReceiveBuffer(), HTTPHeader: http.Header{"Authorization": {"Bearer bob-token"}}})
	stuck.negotiate("chat.messages")
	stuck.ok(ws.OpSubscribe, `,"subject":"chat.messages","maxInFlight":1000`, ws.OpSubscribed)

	var got [3]atomic.Int64
	for i := range got {
		s := v.dial(t, "bob-token", []string{"chat.messages"})
		_, err := s.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error {
			got[i].Add(1)
			return nil
		}, pigeon.WithMaxInFlight(16))
		require.NoError(t, err)
	}
	alice := v.dial(t, "alice-token", []string{"chat.messages"})
	big := strings.Repeat("x", 64<<10)
	published := 0
	deadline := time.Now().Add(time.Minute)
	for v.srv.Stats().Stalled == 0 {
		require.True(t, time.Now().Before(deadline), "the stuck consumer was never closed (%d published)", published)
		_, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"text":"` + big + `"}`)})
		require.NoError(t, err)
		published++
		for i := range got {
			eventually(t, func() bool { return got[i].Load() == int64(published) }, "subscriber %d got %d of %d", i, got[i].Load(), published)
		}
	}
	t.Logf("stalled after %d messages", published)
	require.Equal(t, websocket.StatusPolicyViolation, stuck.closeStatus())
	for i := range got {
		require.Equal(t, int64(published), got[i].Load(), "subscriber %d", i)
	}
	require.Equal(t, int64(1), v.srv.Stats().Stalled)
	eventually(t, func() bool { return v.srv.Stats().Open == 4 }, "only the stuck consumer is gone: %+v", v.srv.Stats())
}

func TestKeepaliveClosesASilentPeer(t *testing.T) {
	// Pings go out often, but each waits long for its pong: the live
	// session must not be taken for a silent one when its reader is not
	// scheduled for a moment (-race on a busy machine easily stalls a
	// goroutine for more than 50 ms). The silent peer never answers, so
	// it is closed all the same, a timeout later.
	v := newEnv(t, &ws.Options{PingInterval: 20 * time.Millisecond, PingTimeout: 2 * time.Second})
	// A live session answers pings while it reads.
	s := v.dial(t, "alice-token", []string{"chat.messages"})
	// A peer that never reads never answers a ping.
	c, _, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer bob-token"}}})
	require.NoError(t, err)
	defer c.CloseNow()
	eventually(t, func() bool { return v.srv.Stats().PingTimeouts == 1 && v.srv.Stats().Open == 1 }, "the silent peer is closed: %+v", v.srv.Stats())
	for range 5 {
		_, err := s.Publish(context.Background(), &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"})
		require.NoError(t, err)
		time.Sleep(20 * time.Millisecond) // span several ping intervals
	}
	require.Equal(t, int64(1), v.srv.Stats().PingTimeouts)
	select {
	case <-s.Done():
		t.Fatalf("the live session was closed: %v", s.Err())
	default:
	}
}

func TestShutdownClosesWith1001(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	s := v.dial(t, "bob-token", []string{"chat.messages"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status := make(chan websocket.StatusCode, 1)
	go func() { status <- r.closeStatus() }()
	require.NoError(t, v.srv.Shutdown(ctx))
	require.NoError(t, v.srv.Shutdown(ctx), "idempotent")
	require.Equal(t, websocket.StatusGoingAway, <-status)
	<-s.Done()
	_, err := s.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"})
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeShutdown, pe.Code)
	require.ErrorIs(t, err, pigeon.ErrClosed)

	_, resp, err := websocket.Dial(ctx, v.url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	require.Error(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

// Publishers hammer the server while it shuts down: every publish the
// server answered "accepted" is in the store, every message stored was
// answered, and every accepted job was either handled by the WebSocket
// worker or is still waiting for the next one.
func TestShutdownUnderLoadLosesNoAcceptedMessage(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	var mu sync.Mutex
	accepted := map[string]bool{}
	handled := map[string]bool{}
	worker := v.dial(t, "crew-token", []string{"jobs.run"})
	_, err := worker.Subscribe(ctx, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		handled[d.Message.ID] = true
		mu.Unlock()
		return nil
	}, pigeon.WithMaxInFlight(8))
	require.NoError(t, err)

	var wg sync.WaitGroup
	var refusals atomic.Int64
	for range 4 {
		s := v.dial(t, "boss-token", []string{"jobs.run"})
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					res, err := s.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
					if err != nil {
						var pe *pigeon.Error
						if !errors.As(err, &pe) || (pe.Code != pigeon.CodeShutdown && pe.Code != pigeon.CodeSessionClosed) {
							t.Errorf("unexpected error: %v", err)
						}
						refusals.Add(1)
						return
					}
					mu.Lock()
					accepted[res.Message.ID] = true
					mu.Unlock()
				}
			}()
		}
	}
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(accepted) >= 300 }, "load builds up")
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, v.srv.Shutdown(sctx))
	wg.Wait()
	require.Equal(t, int64(16), refusals.Load(), "every publisher learned of the shutdown")

	mu.Lock()
	defer mu.Unlock()
	_, last, err := v.st.Bounds(ctx, "jobs.run")
	require.NoError(t, err)
	require.Equal(t, len(accepted), int(last), "stored exactly what was answered accepted")
	for id := range accepted {
		_, err := v.st.Lookup(ctx, id)
		require.NoError(t, err, "accepted message %s is stored", id)
	}
	// What the worker did not handle is still due: another worker gets it.
	crew, err := v.e.Connect(ctx, "crew-token", []string{"jobs.run"})
	require.NoError(t, err)
	defer crew.Close(ctx)
	rest := map[string]bool{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("handled %d, received after the shutdown %d; the group: %s", len(handled), len(rest), groupState(t, v, "jobs.run"))
		}
	})
	eventually(t, func() bool {
		msgs, err := crew.Receive(ctx, "jobs.run", 1000)
		require.NoError(t, err)
		for _, m := range msgs {
			rest[m.ID] = true
			require.NoError(t, crew.Ack(ctx, "jobs.run", m.ID))
		}
		for id := range accepted {
			if !handled[id] && !rest[id] {
				return false
			}
		}
		return true
	}, "every accepted job is handled or still due (accepted %d)", len(accepted))
	require.Equal(t, transporttest.Crew, crew.Contract().Principal())
}

// A consumer whose handler is stuck holds only its own deliveries: the
// publisher and a fast consumer on another connection carry on.
func TestSlowHandlerDoesNotStallOthers(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	slow := v.dial(t, "notifier-token", []string{"notifications.send"})
	release := make(chan struct{})
	var slowGot atomic.Int64
	_, err := slow.Subscribe(ctx, "notifications.send", func(ctx context.Context, _ *pigeon.Delivery) error {
		slowGot.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, pigeon.WithGroup("slow"))
	require.NoError(t, err)
	fast := v.dial(t, "notifier-token", []string{"notifications.send"})
	var fastGot atomic.Int64
	_, err = fast.Subscribe(ctx, "notifications.send", func(context.Context, *pigeon.Delivery) error {
		fastGot.Add(1)
		return nil
	}, pigeon.WithGroup("fast"))
	require.NoError(t, err)
	orders := v.dial(t, "orders-token", []string{"notifications.send"})
	const n = 200
	for i := range n {
		_, err := orders.Publish(ctx, demo.Notification("k-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-"+itoa(i)))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return fastGot.Load() == n }, "the fast group got %d of %d", fastGot.Load(), n)
	require.Equal(t, int64(1), slowGot.Load(), "the slow group holds one message at a time")
	close(release)
	eventually(t, func() bool { return slowGot.Load() == n }, "the slow group catches up: %d", slowGot.Load())
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

// groupState is the stored progress of the default group of subject.
func groupState(t testing.TB, v *env, subject string) string {
	st, err := v.st.LoadGroup(context.Background(), store.GroupKey{Subject: subject, Group: pigeon.DefaultGroup})
	require.NoError(t, err)
	return fmt.Sprintf("floor %d, done %d, attempts %v", st.Floor, len(st.Done), st.Attempts)
}

// A connection that closes while its subscribe frame is being worked on
// ends that subscription too: nothing keeps the connection from finishing.
// (Found by FuzzFrames.)
func TestCloseDuringSubscribeEndsTheSubscription(t *testing.T) {
	v := newEnv(t, nil, manyContracts)
	for range 300 {
		r := v.raw(t, "alice-token")
		r.negotiate("chat.messages")
		r.write(`{"op":"subscribe","id":"s","subject":"chat.messages","filter":"message.type == 'chat'"}`)
		_ = r.c.Close(websocket.StatusNormalClosure, "")
	}
	eventually(t, func() bool { return v.srv.Stats().Open == 0 }, "every connection finished: %+v", v.srv.Stats())
	require.Zero(t, v.srv.Stats().QueuedBytes)
}
