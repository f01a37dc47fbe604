// Package transporttest is the conformance suite every pigeon.Session
// implementation passes: the in-process session and the WebSocket session
// run the same scenarios against an engine built from Options().
package transporttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
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
	// ConnectWith is Connect with connect options (a contract's lifetime,
	// WithoutAutoRenew); nil skips the scenarios that need it.
	ConnectWith func(ctx context.Context, token string, subjects []string, opts ...pigeon.ConnectOption) (pigeon.Session, error)
	// Trim removes the messages of subject through sequence seq from the
	// engine's store, as retention does (store.SeqTrimmer): their ids
	// are free for newer messages. Nil skips the scenarios that need it.
	Trim func(ctx context.Context, subject string, seq uint64) error
}

// Trimmer is a Harness's Trim for an engine over st: nil when st cannot
// trim by sequence (store.SeqTrimmer).
func Trimmer(st store.Store) func(ctx context.Context, subject string, seq uint64) error {
	tr, ok := st.(store.SeqTrimmer)
	if !ok {
		return nil
	}
	return func(ctx context.Context, subject string, seq uint64) error {
		_, err := tr.TrimThrough(ctx, subject, seq)
		return err
	}
}

// Options returns the engine options the suite needs: the demo catalog
// plus chat.messages (pubsub), stock.levels (pubsub, a schema bounding
// an integer), jobs.run (work queue, 300 ms ack wait,
// 3 attempts, quarantine on handler failure) and jobs.batch (jobs.run
// with an hour's ack wait, for scenarios that count each job handled
// once: under -race on a busy machine 300 ms can pass between a delivery
// and its ack, and the lease that runs out hands the job out again), and
// their tokens. The retry backoff is scaled down to milliseconds.
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
	cat.Schemas["stock.level.v1"] = []byte(`{"type":"object","required":["qty"],"properties":{"qty":{"type":"integer","minimum":0,"maximum":100}}}`)
	cat.Subjects = append(cat.Subjects, pigeon.SubjectPolicy{
		Name: "stock.levels", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"count"},
		Schema: &pigeon.SchemaRef{Name: "stock.level.v1"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{Alice}}},
		},
	})
	batch := cat.Subjects[len(cat.Subjects)-2]
	batch.Name, batch.Delivery.AckWaitMs = "jobs.batch", time.Hour.Milliseconds()
	batch.Policy = maps.Clone(batch.Policy)
	cat.Subjects = append(cat.Subjects, batch)
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
		{"BadMessageRefusedAlone", testBadMessageRefusedAlone},
		{"SchemaJudgesNumbersAsSent", testSchemaJudgesNumbersAsSent},
		{"NegotiationDenied", testNegotiationDenied},
		{"SubscribeWithSelector", testSubscribeWithSelector},
		{"FanOutInOrder", testFanOut},
		{"StartPositions", testStartPositions},
		{"WorkQueueCompetingConsumers", testWorkQueueCompeting},
		{"WorkQueueRedelivery", testWorkQueueRedelivery},
		{"WorkQueueExhaustedQuarantined", testWorkQueueExhausted},
		{"HandlerPanicNacks", testHandlerPanic},
		{"RetryAfterDelay", testRetryAfter},
		{"RetryAfterBeyondMax", testRetryAfterBeyondMax},
		{"PullNackBeyondMax", testPullNackBeyondMax},
		{"UnsubscribeReturnsLeases", testUnsubscribeReturnsLeases},
		{"RequestReply", testRequestReply},
		{"RequestTimeout", testRequestTimeout},
		{"RevocationStopsSubscription", testRevocation},
		{"SessionRenewsItsContract", testSessionRenews},
		{"SubscribeBadInput", testSubscribeBadInput},
		{"SlowSubscriberDoesNotBlockOthers", testSlowSubscriber},
		{"ReusedIDPullAnswersNameTheSequence", testReusedIDPull},
		{"ReusedIDPushLateAnswer", testReusedIDPush},
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
