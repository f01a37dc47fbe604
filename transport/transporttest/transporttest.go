// Package transporttest is the conformance suite every pigeon.Session
// implementation passes: the in-process session and the WebSocket session
// run the same scenarios against an engine built from Options().
package transporttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// Principals and tokens of the suite, beyond the demo ones.
const (
	Alice = "spiffe://chat/alice"
	Bob   = "spiffe://chat/bob"
	Boss  = "spiffe://jobs/boss"
	Crew  = "spiffe://jobs/crew"
)

// Harness is one transport under test.
type Harness struct {
	// Engine is the broker behind the transport (built from Options()).
	Engine *pigeon.Engine
	// Connect authenticates token and negotiates subjects over the transport.
	Connect func(ctx context.Context, token string, subjects []string) (pigeon.Session, error)
}

// Options returns the engine options the suite needs: the demo catalog
// plus chat.messages (pubsub) and jobs.run (work queue, 300 ms ack wait,
// 3 attempts, quarantine on handler failure), and their tokens. The retry
// backoff is scaled down to milliseconds.
func Options() *pigeon.Options {
	cat := demo.Catalog()
	cat.Subjects = append(cat.Subjects,
		pigeon.SubjectPolicy{
			Name: "chat.messages", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{Alice, Bob}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{Alice, Bob}}},
				pigeon.OpAck:     {{Effect: "allow", Principals: []string{Alice, Bob}}},
			},
		},
		pigeon.SubjectPolicy{
			Name: "jobs.run", Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"run"},
			Delivery:   pigeon.DeliveryPolicy{AckWaitMs: 300, Retry: pigeon.RetryPolicy{MaxAttempts: 3, Backoff: "fixed"}},
			Quarantine: pigeon.QuarantinePolicy{OnHandlerFailure: true},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{Boss}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{Crew}}},
				pigeon.OpAck:     {{Effect: "allow", Principals: []string{Crew}}},
			},
		},
	)
	tokens := append(demo.Tokens(),
		pigeon.StaticToken{Token: "alice-token", Principal: Alice},
		pigeon.StaticToken{Token: "bob-token", Principal: Bob},
		pigeon.StaticToken{Token: "boss-token", Principal: Boss},
		pigeon.StaticToken{Token: "crew-token", Principal: Crew},
	)
	return &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog:       cat,
		Region:        "uk",
		RetryBase:     10 * time.Millisecond,
	}
}

// Run runs every scenario, each on a fresh harness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	scenarios := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"PublishReceiveAck", testPublishReceiveAck},
		{"DenialIsTypedError", testDenialIsTypedError},
		{"NegotiationDenied", testNegotiationDenied},
		{"SubscribeWithSelector", testSubscribeWithSelector},
		{"FanOutInOrder", testFanOut},
		{"StartPositions", testStartPositions},
		{"WorkQueueCompetingConsumers", testWorkQueueCompeting},
		{"WorkQueueRedelivery", testWorkQueueRedelivery},
		{"WorkQueueExhaustedQuarantined", testWorkQueueExhausted},
		{"HandlerPanicNacks", testHandlerPanic},
		{"RetryAfterDelay", testRetryAfter},
		{"UnsubscribeReturnsLeases", testUnsubscribeReturnsLeases},
		{"RequestReply", testRequestReply},
		{"RequestTimeout", testRequestTimeout},
		{"RevocationStopsSubscription", testRevocation},
		{"SubscribeBadInput", testSubscribeBadInput},
		{"SlowSubscriberDoesNotBlockOthers", testSlowSubscriber},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t)
			sc.fn(t, h)
		})
	}
}

func connect(t *testing.T, h Harness, token string, subjects ...string) pigeon.Session {
	t.Helper()
	s, err := h.Connect(context.Background(), token, subjects)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func requireCode(t *testing.T, err error, code pigeon.Code) *pigeon.Error {
	t.Helper()
	require.Error(t, err)
	var pe *pigeon.Error
	require.True(t, errors.As(err, &pe), "error %v is not *pigeon.Error", err)
	require.Equal(t, code, pe.Code, "error: %v", err)
	return pe
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: "+msg, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func chat(room, text string) *pigeon.Message {
	data, _ := json.Marshal(map[string]string{"kind": "chat", "room": room, "text": text})
	return &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: data}
}

func job(n int) *pigeon.Message {
	return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// collector records deliveries.
type collector struct {
	mu   sync.Mutex
	msgs []*pigeon.Message
	att  []int
}

func (c *collector) handler(ctx context.Context, d *pigeon.Delivery) error {
	c.mu.Lock()
	c.msgs = append(c.msgs, d.Message)
	c.att = append(c.att, d.Attempt)
	c.mu.Unlock()
	return nil
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		var d map[string]any
		_ = json.Unmarshal(m.Data, &d)
		out = append(out, fmt.Sprint(d["text"]))
	}
	return out
}

func testPublishReceiveAck(t *testing.T, h Harness) {
	ctx := context.Background()
	orders := connect(t, h, "orders-token", "notifications.send")
	worker := connect(t, h, "notifier-token", "notifications.send")
	res, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.Equal(t, demo.Orders, res.Message.Source)
	dup, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, res.Message.ID, dup.Message.ID)
	got, err := worker.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, res.Message.ID, got[0].ID)
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID))
	require.NoError(t, worker.Ack(ctx, "notifications.send", got[0].ID))
	requireCode(t, worker.Ack(ctx, "notifications.send", "msg_nope"), pigeon.CodeMessageNotFound)
	_, err = worker.Publish(ctx, demo.Notification("k-2"))
	requireCode(t, err, pigeon.CodeOperationNotInContract)
	ops := connect(t, h, "notify-replay-token", "notifications.send")
	_, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send"})
	requireCode(t, err, pigeon.CodeReplayDenied)
	again, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "audit"})
	require.NoError(t, err)
	require.Len(t, again, 1)
}

func testDenialIsTypedError(t *testing.T, h Harness) {
	ctx := context.Background()
	s := connect(t, h, "checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)
	_, err := s.Publish(ctx, m)
	pe := requireCode(t, err, pigeon.CodeRawPANDetected)
	require.ErrorIs(t, err, pigeon.ErrDenied)
	require.NotEmpty(t, pe.Details["quarantineId"])
	require.NotContains(t, err.Error(), "4111111111111111")
	m = demo.Payment("o-2")
	m.Subject = "notifications.send"
	_, err = s.Publish(ctx, m)
	requireCode(t, err, pigeon.CodeSubjectNotInContract)
}

func testNegotiationDenied(t *testing.T, h Harness) {
	ctx := context.Background()
	_, err := h.Connect(ctx, "catalog-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)
	_, err = h.Connect(ctx, "nobody-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeUnauthenticated)
	_, err = h.Connect(ctx, "checkout-token", []string{"no.such.subject"})
	requireCode(t, err, pigeon.CodeSubjectNotFound)
}

func testSubscribeWithSelector(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	bob := connect(t, h, "bob-token", "chat.messages")
	var lobby, all collector
	sub, err := bob.Subscribe(ctx, "chat.messages", lobby.handler, pigeon.WithSelector("/kind=chat/room=lobby"))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", all.handler)
	require.NoError(t, err)
	for i, room := range []string{"lobby", "kitchen", "lobby", "garden"} {
		_, err := alice.Publish(ctx, chat(room, fmt.Sprint(i)))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return all.len() == 4 }, "all messages, got %d", all.len())
	eventually(t, func() bool { return lobby.len() == 2 }, "lobby messages")
	require.Equal(t, []string{"0", "2"}, lobby.texts())
	require.Equal(t, []string{"0", "1", "2", "3"}, all.texts())
	require.NotEmpty(t, sub.ID())
	require.NoError(t, sub.Unsubscribe(ctx))
	require.NoError(t, sub.Unsubscribe(ctx))
	<-sub.Done()
	require.NoError(t, sub.Err())
	_, err = alice.Publish(ctx, chat("lobby", "after"))
	require.NoError(t, err)
	eventually(t, func() bool { return all.len() == 5 }, "the other subscription goes on")
	require.Equal(t, 2, lobby.len(), "no delivery after unsubscribe")
}

func testFanOut(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	const subs, n = 3, 50
	cols := make([]*collector, subs)
	for i := range cols {
		cols[i] = &collector{}
		s := connect(t, h, "bob-token", "chat.messages")
		_, err := s.Subscribe(ctx, "chat.messages", cols[i].handler)
		require.NoError(t, err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprint(i))
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	for i, c := range cols {
		eventually(t, func() bool { return c.len() == n }, "subscriber %d got %d", i, c.len())
		require.Equal(t, want, c.texts(), "in sequence order")
	}
}

func testStartPositions(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	for i := range 3 {
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	bob := connect(t, h, "bob-token", "chat.messages")
	var first, at, fresh collector
	_, err := bob.Subscribe(ctx, "chat.messages", first.handler, pigeon.WithStart(pigeon.StartFirst))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", at.handler, pigeon.WithStart(pigeon.StartAt(2)))
	require.NoError(t, err)
	_, err = bob.Subscribe(ctx, "chat.messages", fresh.handler)
	require.NoError(t, err)
	_, err = alice.Publish(ctx, chat("lobby", "3"))
	require.NoError(t, err)
	eventually(t, func() bool { return first.len() == 4 && at.len() == 3 && fresh.len() == 1 }, "start positions: %d %d %d", first.len(), at.len(), fresh.len())
	require.Equal(t, []string{"1", "2", "3"}, at.texts())
	require.Equal(t, []string{"3"}, fresh.texts())
}

func testWorkQueueCompeting(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	var mu sync.Mutex
	seen := map[string]int{}
	var concurrent, peak int
	handler := func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		seen[d.Message.ID]++
		concurrent++
		peak = max(peak, concurrent)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		concurrent--
		mu.Unlock()
		return nil
	}
	for range 4 {
		crew := connect(t, h, "crew-token", "jobs.run")
		_, err := crew.Subscribe(ctx, "jobs.run", handler, pigeon.WithGroup("workers"), pigeon.WithMaxInFlight(2))
		require.NoError(t, err)
	}
	const n = 40
	for i := range n {
		_, err := boss.Publish(ctx, job(i))
		require.NoError(t, err)
	}
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n }, "all jobs handled")
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		require.Equal(t, 1, c, "job %s delivered once", id)
	}
}

func testWorkQueueRedelivery(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var attempts []int
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, d.Attempt)
		if d.Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 }, "redelivered after a failure")
	time.Sleep(400 * time.Millisecond) // past the ack wait: an acked job never returns
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, attempts)
}

func testWorkQueueExhausted(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	calls := 0
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return errors.New("always fails")
	})
	require.NoError(t, err)
	res, err := boss.Publish(ctx, job(7))
	require.NoError(t, err)
	eventually(t, func() bool {
		q, err := h.Engine.Quarantine(ctx, time.Time{}, 0)
		return err == nil && len(q) == 1 && q[0].MessageID == res.Message.ID && q[0].Code == string(pigeon.CodeDeliveryExhausted)
	}, "exhausted job quarantined")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 3, calls, "maxAttempts deliveries")
}

func testHandlerPanic(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var attempts []int
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if d.Attempt == 1 {
			panic("handler bug")
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == 2 }, "a panic nacks and the job comes back")
}

// testRetryAfter nacks with a delay longer than the backoff (10 ms) and the
// ack wait (300 ms): the next attempt must not come before it.
func testRetryAfter(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew := connect(t, h, "crew-token", "jobs.run")
	var mu sync.Mutex
	var at []time.Time
	_, err := crew.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if d.Attempt == 1 {
			return pigeon.RetryAfter(700*time.Millisecond, errors.New("not yet"))
		}
		return nil
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(at) == 2 }, "redelivered after the delay")
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 650*time.Millisecond, "the asked delay is honoured (a lower bound, never an upper one)")
}

func testUnsubscribeReturnsLeases(t *testing.T, h Harness) {
	ctx := context.Background()
	boss := connect(t, h, "boss-token", "jobs.run")
	crew1 := connect(t, h, "crew-token", "jobs.run")
	crew2 := connect(t, h, "crew-token", "jobs.run")
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	sub1, err := crew1.Subscribe(ctx, "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("gave up")
	})
	require.NoError(t, err)
	_, err = boss.Publish(ctx, job(1))
	require.NoError(t, err)
	<-started
	var got collector
	_, err = crew2.Subscribe(ctx, "jobs.run", got.handler)
	require.NoError(t, err)
	close(release)
	require.NoError(t, sub1.Unsubscribe(ctx))
	eventually(t, func() bool { return got.len() == 1 }, "the departed consumer's job goes to the other")
}

func testRequestReply(t *testing.T, h Harness) {
	ctx := context.Background()
	checkout := connect(t, h, "checkout-token", "payments.authorize")
	gateway := connect(t, h, "gateway-token", "payments.authorize")
	_, err := gateway.Subscribe(ctx, "payments.authorize", func(ctx context.Context, d *pigeon.Delivery) error {
		_, err := d.Session.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
			Intent: "authorize_payment", Classification: "pci", CorrelationID: d.Message.ID, Data: json.RawMessage(`{"approved":true}`)})
		return err
	})
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reply, err := checkout.Request(rctx, demo.Payment("o-1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
	require.Equal(t, demo.Gateway, reply.Source)
}

func testRequestTimeout(t *testing.T, h Harness) {
	checkout := connect(t, h, "checkout-token", "payments.authorize")
	rctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := checkout.Request(rctx, demo.Payment("o-1"))
	requireCode(t, err, pigeon.CodeRequestTimeout)
}

func testRevocation(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	bob := connect(t, h, "bob-token", "chat.messages")
	var got collector
	sub, err := bob.Subscribe(ctx, "chat.messages", got.handler)
	require.NoError(t, err)
	_, err = alice.Publish(ctx, chat("lobby", "before"))
	require.NoError(t, err)
	eventually(t, func() bool { return got.len() == 1 }, "delivery before revocation")
	p, err := h.Engine.Authenticate(ctx, "bob-token")
	require.NoError(t, err)
	require.NoError(t, h.Engine.RevokeContract(ctx, p, bob.Contract().ID()))
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("subscription did not stop on revocation")
	}
	requireCode(t, sub.Err(), pigeon.CodeContractRevoked)
	_, err = alice.Publish(ctx, chat("lobby", "after"))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 1, got.len(), "no delivery after revocation")
	_, err = bob.Publish(ctx, chat("lobby", "x"))
	requireCode(t, err, pigeon.CodeContractRevoked)
	recs, err := h.Engine.Audit(ctx, 0, 0)
	require.NoError(t, err)
	found := false
	for _, r := range recs {
		if r.Type == "subscription.stopped" && r.Code == string(pigeon.CodeContractRevoked) {
			found = true
		}
	}
	require.True(t, found, "the stop is audited")
}

func testSubscribeBadInput(t *testing.T, h Harness) {
	ctx := context.Background()
	bob := connect(t, h, "bob-token", "chat.messages")
	nop := func(context.Context, *pigeon.Delivery) error { return nil }
	tests := []struct {
		name    string
		subject string
		opts    []pigeon.SubscribeOption
		code    pigeon.Code
	}{
		{"unknown subject", "no.such", nil, pigeon.CodeSubjectNotFound},
		{"subject outside contract", "payments.authorize", nil, pigeon.CodeSubjectNotInContract},
		{"bad selector", "chat.messages", []pigeon.SubscribeOption{pigeon.WithSelector("kind=chat")}, pigeon.CodeSelectorInvalid},
		{"bad filter", "chat.messages", []pigeon.SubscribeOption{pigeon.WithFilter("message.data.x ==")}, pigeon.CodeFilterInvalid},
		{"max in flight negative", "chat.messages", []pigeon.SubscribeOption{pigeon.WithMaxInFlight(-1)}, pigeon.CodeInvalidArgument},
		{"max in flight too large", "chat.messages", []pigeon.SubscribeOption{pigeon.WithMaxInFlight(pigeon.MaxInFlightLimit + 1)}, pigeon.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bob.Subscribe(ctx, tc.subject, nop, tc.opts...)
			requireCode(t, err, tc.code)
		})
	}
	notifier := connect(t, h, "orders-token", "notifications.send")
	_, err := notifier.Subscribe(ctx, "notifications.send", nop)
	requireCode(t, err, pigeon.CodeOperationNotInContract)
}

func testSlowSubscriber(t *testing.T, h Harness) {
	ctx := context.Background()
	alice := connect(t, h, "alice-token", "chat.messages")
	slow := connect(t, h, "bob-token", "chat.messages")
	fast := connect(t, h, "bob-token", "chat.messages")
	block := make(chan struct{})
	var slowGot collector
	_, err := slow.Subscribe(ctx, "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return slowGot.handler(ctx, d)
	})
	require.NoError(t, err)
	var fastGot collector
	_, err = fast.Subscribe(ctx, "chat.messages", fastGot.handler)
	require.NoError(t, err)
	const n = 600 // more than a live queue holds
	for i := range n {
		_, err := alice.Publish(ctx, chat("lobby", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return fastGot.len() == n }, "the fast subscriber gets everything while the slow one is stuck (%d)", fastGot.len())
	close(block)
	eventually(t, func() bool { return slowGot.len() == n }, "the slow subscriber catches up (%d)", slowGot.len())
	texts := slowGot.texts()
	sorted := append([]string(nil), texts...)
	sort.SliceStable(sorted, func(i, j int) bool { return atoi(sorted[i]) < atoi(sorted[j]) })
	require.Equal(t, sorted, texts, "in order, without gaps or repeats")
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}
