package ws_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// Every refusal the WebSocket session returns is the error the in-process
// session returns: the same code and message, the same sentinel groups
// and, for an admission refusal, the same decision.
func TestSessionRefusalsMatchInProcess(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	sessions := func(t *testing.T, token string, subjects ...string) (local, remote pigeon.Session) {
		local, err := v.e.Connect(ctx, token, subjects, pigeon.WithRegion("uk"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = local.Close(ctx) })
		return local, v.dial(t, token, subjects)
	}
	payment := func(mutate func(m *pigeon.Message)) *pigeon.Message {
		m := demo.Payment("o-1")
		mutate(m)
		return m
	}
	withData := func(data string) func(*pigeon.Message) {
		return func(m *pigeon.Message) { m.Data = json.RawMessage(data) }
	}
	tests := []struct {
		name  string
		token string
		subj  string
		op    func(s pigeon.Session) error
		code  pigeon.Code
	}{
		{"schema", "checkout-token", "payments.authorize", publishOf(payment(withData(`{"merchantId":"m"}`))), pigeon.CodeSchemaInvalid},
		{"forbidden field", "checkout-token", "payments.authorize", publishOf(payment(withData(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111111111111111"}}`))), pigeon.CodeSensitiveFieldDenied},
		{"raw PAN", "checkout-token", "payments.authorize", publishOf(payment(withData(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`))), pigeon.CodeRawPANDetected},
		{"intent", "checkout-token", "payments.authorize", publishOf(payment(func(m *pigeon.Message) { m.Intent = "refund" })), pigeon.CodeIntentDenied},
		{"classification", "checkout-token", "payments.authorize", publishOf(payment(func(m *pigeon.Message) { m.Classification = "internal" })), pigeon.CodeClassificationDenied},
		{"region", "checkout-token", "payments.authorize", publishOf(payment(func(m *pigeon.Message) { m.Region = "us" })), pigeon.CodeRegionDenied},
		{"idempotency", "checkout-token", "payments.authorize", publishOf(payment(func(m *pigeon.Message) { m.IdempotencyKey = "" })), pigeon.CodeIdempotencyRequired},
		{"envelope", "checkout-token", "payments.authorize", publishOf(payment(func(m *pigeon.Message) { m.Type = "" })), pigeon.CodeEnvelopeInvalid},
		{"subject outside contract", "checkout-token", "payments.authorize", publishOf(demo.Notification("k")), pigeon.CodeSubjectNotInContract},
		{"operation outside contract", "notifier-token", "notifications.send", publishOf(demo.Notification("k")), pigeon.CodeOperationNotInContract},
		{"unknown subject", "notifier-token", "notifications.send", func(s pigeon.Session) error { _, err := s.Receive(ctx, "no.such", 1); return err }, pigeon.CodeSubjectNotFound},
		{"replay without reason", "notify-replay-token", "notifications.send", func(s pigeon.Session) error {
			_, err := s.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send"})
			return err
		}, pigeon.CodeReplayDenied},
		{"ack unknown message", "notifier-token", "notifications.send", func(s pigeon.Session) error { return s.Ack(ctx, "notifications.send", "msg_nope") }, pigeon.CodeMessageNotFound},
		{"nack on pubsub", "bob-token", "chat.messages", func(s pigeon.Session) error {
			alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
			require.NoError(t, err)
			defer alice.Close(ctx)
			res, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"})
			require.NoError(t, err)
			return s.Nack(ctx, "chat.messages", res.Message.ID, 0)
		}, pigeon.CodeBadRequest},
		{"no handler", "bob-token", "chat.messages", func(s pigeon.Session) error { _, err := s.Subscribe(ctx, "chat.messages", nil); return err }, pigeon.CodeInvalidArgument},
		{"nil message", "bob-token", "chat.messages", func(s pigeon.Session) error { _, err := s.Publish(ctx, nil); return err }, pigeon.CodeEnvelopeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local, remote := sessions(t, tc.token, tc.subj)
			want, got := tc.op(local), tc.op(remote)
			var w, g *pigeon.Error
			require.ErrorAs(t, want, &w)
			require.ErrorAs(t, got, &g, "remote: %v", got)
			require.Equal(t, tc.code, w.Code, "in process: %v", want)
			require.Equal(t, w.Code, g.Code)
			require.Equal(t, w.Message, g.Message)
			for _, sentinel := range []error{pigeon.ErrDenied, pigeon.ErrQuarantined, pigeon.ErrContract, pigeon.ErrInvalid, pigeon.ErrNotFound, pigeon.ErrClosed} {
				require.Equal(t, errors.Is(want, sentinel), errors.Is(got, sentinel), "errors.Is(%v)", sentinel)
			}
			require.Equal(t, w.Decision == nil, g.Decision == nil)
			if w.Decision != nil {
				require.Equal(t, w.Decision.Outcome, g.Decision.Outcome)
				require.Equal(t, w.Decision.Gate, g.Decision.Gate)
				require.Equal(t, w.Decision.PolicyID, g.Decision.PolicyID)
				require.Equal(t, w.Details["gate"], g.Details["gate"])
				require.Equal(t, w.Details["quarantineId"] != nil, g.Details["quarantineId"] != nil)
			}
		})
	}
}

func publishOf(m *pigeon.Message) func(pigeon.Session) error {
	return func(s pigeon.Session) error {
		_, err := s.Publish(context.Background(), m)
		return err
	}
}

// A caller's deadline ends its own call, never the connection.
func TestCallerDeadlineLeavesTheConnectionUp(t *testing.T) {
	v := newEnv(t, nil)
	s := v.dial(t, "checkout-token", []string{"payments.authorize"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := s.Request(ctx, demo.Payment("o-1"))
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeRequestTimeout, pe.Code)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	_, err = s.Publish(done, demo.Payment("o-2"))
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeRequestTimeout, pe.Code)
	res, err := s.Publish(context.Background(), demo.Payment("o-3"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.NoError(t, s.Err())
}

func TestSessionSubprotocolAuthAndRegion(t *testing.T) {
	v := newEnv(t, nil)
	s := v.dial(t, "orders-token", []string{"notifications.send"}, ws.WithSubprotocolAuth(), ws.WithConnectOptions(pigeon.WithRegion("eu"), pigeon.WithContractTTL(time.Minute)))
	info := s.Contract().Info()
	require.Equal(t, "eu", info.Region)
	require.WithinDuration(t, info.IssuedAt.Add(time.Minute), info.ExpiresAt, time.Second)
	m := demo.Notification("k-1")
	m.Region = "eu"
	_, err := s.Publish(context.Background(), m)
	require.NoError(t, err)
}

func TestDialFailures(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	var pe *pigeon.Error
	_, err := ws.Dial(ctx, "ftp://example", "alice-token", []string{"chat.messages"})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeInvalidArgument, pe.Code)
	_, err = ws.Dial(ctx, "http://127.0.0.1:1", "alice-token", []string{"chat.messages"})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeSessionClosed, pe.Code)
	// A URL without a path reaches /v1/ws.
	s, err := ws.Dial(ctx, v.hs.URL, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
}

func TestSessionCloseIsIdempotent(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	s := v.dial(t, "bob-token", []string{"chat.messages"})
	sub, err := s.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	require.NoError(t, s.Close(ctx))
	<-sub.Done()
	require.NoError(t, sub.Unsubscribe(ctx))
	_, err = s.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"})
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeSessionClosed, pe.Code)
	require.ErrorIs(t, s.Reconnect(ctx), pigeon.ErrClosed)
	eventually(t, func() bool { return v.srv.Stats().Open == 0 }, "the server side is gone")
}

// texts collects the "text" of chat deliveries.
type texts struct {
	mu  sync.Mutex
	got []string
}

func (x *texts) handler(_ context.Context, d *pigeon.Delivery) error {
	var data struct{ Text string }
	_ = json.Unmarshal(d.Message.Data, &data)
	x.mu.Lock()
	x.got = append(x.got, data.Text)
	x.mu.Unlock()
	return nil
}

func (x *texts) list() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]string(nil), x.got...)
}

func chatMsg(text string) *pigeon.Message {
	return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"text":"` + text + `"}`)}
}

// Reconnect negotiates a fresh contract and resumes subscriptions: after a
// lost connection, a pubsub subscription resumes after the last message it
// was handed, so nothing published meanwhile is missed.
func TestReconnectResumesSubscriptions(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	var got texts
	sub, err := bob.Subscribe(ctx, "chat.messages", got.handler)
	require.NoError(t, err)
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"}) // in process: survives the network cut
	require.NoError(t, err)
	defer alice.Close(ctx)
	_, err = alice.Publish(ctx, chatMsg("1"))
	require.NoError(t, err)
	eventually(t, func() bool { return len(got.list()) == 1 }, "first delivery")

	first := bob.Contract().ID()
	require.NoError(t, bob.Reconnect(ctx))
	require.NotEqual(t, first, bob.Contract().ID(), "a fresh negotiation")
	_, err = alice.Publish(ctx, chatMsg("2"))
	require.NoError(t, err)
	eventually(t, func() bool { return len(got.list()) == 2 }, "delivery after Reconnect")

	v.kl.kill()
	<-bob.Done()
	var pe *pigeon.Error
	require.ErrorAs(t, bob.Err(), &pe)
	require.Equal(t, pigeon.CodeSessionClosed, pe.Code)
	_, err = bob.Publish(ctx, chatMsg("x"))
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeSessionClosed, pe.Code)
	for _, text := range []string{"3", "4"} {
		_, err = alice.Publish(ctx, chatMsg(text))
		require.NoError(t, err)
	}
	require.NoError(t, bob.Reconnect(ctx))
	require.NoError(t, bob.Err())
	eventually(t, func() bool { return len(got.list()) == 4 }, "the messages of the outage: %v", got.list())
	require.Equal(t, []string{"1", "2", "3", "4"}, got.list())
	select {
	case <-sub.Done():
		t.Fatalf("the subscription ended: %v", sub.Err())
	default:
	}
	require.NoError(t, sub.Unsubscribe(ctx))
}

// A delivery whose handler failed is not skipped by Reconnect: the
// server's redelivery of it would have come on the old connection, so the
// subscription resumes at it (the lowest sequence not handled
// successfully), and it is handled after the reconnect. Messages after it
// may come again (at least once); none is missed.
func TestReconnectRetriesAFailedDelivery(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	var mu sync.Mutex
	var ok []string
	failed := 0
	sub, err := bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		var m struct{ Text string }
		require.NoError(t, json.Unmarshal(d.Message.Data, &m))
		mu.Lock()
		defer mu.Unlock()
		if m.Text == "2" && failed == 0 {
			failed++
			return pigeon.RetryAfter(time.Hour, errors.New("not now")) // its redelivery would come in an hour
		}
		ok = append(ok, m.Text)
		return nil
	})
	require.NoError(t, err)
	handled := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(ok) }
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	for _, text := range []string{"1", "2", "3"} {
		_, err = alice.Publish(ctx, chatMsg(text))
		require.NoError(t, err)
	}
	eventually(t, func() bool { return len(handled()) == 2 }, "1 and 3 handled, 2 failed: %v", handled())

	require.NoError(t, bob.Reconnect(ctx))
	eventually(t, func() bool { return slices.Contains(handled(), "2") }, "2 handled after the reconnect: %v", handled())
	got := handled()
	require.Equal(t, []string{"1", "3", "2"}, got[:3])
	n1 := 0
	for _, x := range got {
		if x == "1" {
			n1++
		}
	}
	require.Equal(t, 1, n1, "what came before the failed one does not come again: %v", got)
	require.NoError(t, sub.Unsubscribe(ctx))
}

// Deliveries of the old connection still queued behind a busy handler at
// Reconnect are dropped, not run: the resumed subscription delivers them
// again, so each is handled once; the one whose handler was running is
// handled again (at least once). Unsubscribe then waits for nothing left.
func TestReconnectDropsQueuedDeliveries(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	count := map[string]int{}
	sub, err := bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		var m struct{ Text string }
		require.NoError(t, json.Unmarshal(d.Message.Data, &m))
		if m.Text == "1" {
			select {
			case started <- struct{}{}:
				<-release
			default:
			}
		}
		mu.Lock()
		count[m.Text]++
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	for _, text := range []string{"1", "2", "3", "4"} {
		_, err = alice.Publish(ctx, chatMsg(text))
		require.NoError(t, err)
	}
	<-started
	eventually(t, func() bool { return ws.QueuedDeliveries(sub) == 3 }, "2, 3 and 4 wait behind 1")
	require.NoError(t, bob.Reconnect(ctx))
	close(release)
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return count["1"] == 2 && count["4"] == 1
	}, "everything handled after the reconnect: %v", count)
	require.NoError(t, sub.Unsubscribe(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"1": 2, "2": 1, "3": 1, "4": 1}, count)
}

// A subscription handed nothing before its connection was lost resumes
// where it started on the server (the subscribed answer's from), not at
// "new" again: what was published during the outage reaches it, what was
// published before it subscribed does not.
func TestReconnectResumesWhereItStarted(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	for _, text := range []string{"before-1", "before-2"} {
		_, err = alice.Publish(ctx, chatMsg(text))
		require.NoError(t, err)
	}
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	var got texts
	sub, err := bob.Subscribe(ctx, "chat.messages", got.handler)
	require.NoError(t, err)
	v.kl.kill()
	<-bob.Done()
	for _, text := range []string{"during-1", "during-2"} {
		_, err = alice.Publish(ctx, chatMsg(text))
		require.NoError(t, err)
	}
	require.NoError(t, bob.Reconnect(ctx))
	eventually(t, func() bool { return len(got.list()) == 2 }, "the outage's messages: %v", got.list())
	require.Equal(t, []string{"during-1", "during-2"}, got.list())
	require.NoError(t, sub.Unsubscribe(ctx))
}

// When the new contract no longer permits a subscription (the policy
// changed while the connection was lost), Reconnect ends it with the
// refusal. (A policy change while connected ends the subscription at once
// with CONTRACT_STALE: the engine's TestPolicyChangeEndsStaleSubscriptionsAtOnce.)
func TestReconnectEndsWhatTheNewContractRefuses(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	sub, err := bob.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	v.kl.kill()
	<-bob.Done()
	p := v.e.Subjects()
	for _, s := range p {
		if s.Name == "chat.messages" {
			s.Policy[pigeon.OpReceive] = nil
			require.NoError(t, v.e.ReplaceSubject(ctx, s))
		}
	}
	require.NoError(t, bob.Reconnect(ctx))
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription went on")
	}
	var pe *pigeon.Error
	require.ErrorAs(t, sub.Err(), &pe)
	require.Equal(t, pigeon.CodeOperationNotInContract, pe.Code)
}

// The context of Dial bounds the dial and the negotiation, not the session.
func TestDialContextBoundsOnlyTheDial(t *testing.T) {
	v := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := ws.Dial(ctx, v.url, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(context.Background())
	cancel()
	_, err = s.Publish(context.Background(), chatMsg("after"))
	require.NoError(t, err)
	require.NoError(t, s.Err())
}

// A subscribe whose caller gave up before the answer leaves no server
// subscription behind: the client ends the one it does not own.
func TestAbandonedSubscribeIsEnded(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	crew := v.dial(t, "crew-token", []string{"jobs.run"})
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := crew.Subscribe(gone, "jobs.run", func(context.Context, *pigeon.Delivery) error { return nil })
	require.Error(t, err, "the caller gave up before sending")
	abandoned := 0
	for range 20 {
		short, cancel := context.WithTimeout(ctx, 100*time.Microsecond)
		if _, err := crew.Subscribe(short, "jobs.run", func(context.Context, *pigeon.Delivery) error { return nil }); err != nil {
			abandoned++
		}
		cancel()
	}
	t.Logf("%d of 20 subscribes abandoned", abandoned)
	count := func(typ string) int {
		recs, err := v.e.Audit(ctx, 0, 0)
		require.NoError(t, err)
		n := 0
		for _, r := range recs {
			if r.Type == typ && r.Principal == transporttest.Crew {
				n++
			}
		}
		return n
	}
	live := 20 - abandoned
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("started %d, stopped %d, live %d", count("subscription.started"), count("subscription.stopped"), live)
		}
	})
	eventually(t, func() bool {
		started, stopped := count("subscription.started"), count("subscription.stopped")
		return started >= live && started-stopped == live
	}, "every server subscription of an abandoned subscribe ends")

	boss := v.dial(t, "boss-token", []string{"jobs.run"})
	_, err = boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run"})
	require.NoError(t, err)
}
