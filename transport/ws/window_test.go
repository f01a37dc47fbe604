package ws_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestWindowAndBatchAcks: a subscription with a window has that many
// deliveries on the wire before the first answer; one ack frame settles
// many, naming in notPending the ids that no delivery waited for; a v1
// subscribe (no window) keeps its maxInFlight.
func TestWindowAndBatchAcks(t *testing.T) {
	v := newEnv(t, nil, longAckWait) // no delivery comes back but for the nacks and the connection's end
	boss := v.raw(t, "boss-token")
	boss.negotiate("jobs.run")
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	for i := range 10 {
		boss.ok(ws.OpPublish, `,"message":{"type":"job","subject":"jobs.run","intent":"run","data":{"n":`+strconv.Itoa(i)+`}}`, ws.OpDecision)
	}
	sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","window":4`, ws.OpSubscribed).Sub
	var ids []string
	for range 4 {
		d := crew.push()
		require.Equal(t, ws.OpDeliver, d.Op)
		ids = append(ids, d.Message.ID)
	}
	// The window is full: nothing more comes until an answer.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, _, err := crew.c.Read(ctx)
	cancel()
	require.Error(t, err, "a fifth delivery before any answer")
	crew = v.raw(t, "crew-token") // the timed-out read closed that connection
	crew.negotiate("jobs.run")
	sub = crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","window":4`, ws.OpSubscribed).Sub
	ids = ids[:0]
	for range 4 {
		ids = append(ids, crew.push().Message.ID)
	}
	list := `"` + strings.Join(ids[:3], `","`) + `","msg_unknown"`
	ok := crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":[`+list+`]`, ws.OpOK)
	require.Equal(t, []string{"msg_unknown"}, ok.NotPending)
	// Three slots free: three more deliveries.
	attempts := map[string]int{}
	var more []string
	for range 3 {
		d := crew.push()
		require.Equal(t, ws.OpDeliver, d.Op)
		more = append(more, d.Message.ID)
		attempts[d.Message.ID] = d.Attempt
	}
	// A nack of many gives them all back, each as its next attempt (jobs.run
	// allows 3; one nacked at its third is exhausted instead).
	nack := crew.ok(ws.OpNack, `,"sub":"`+sub+`","delayMs":0,"messageIds":["`+strings.Join(more, `","`)+`"]`, ws.OpOK)
	require.Empty(t, nack.NotPending)
	want := map[string]int{}
	for _, id := range more {
		if attempts[id] < 3 {
			want[id] = attempts[id] + 1
		}
	}
	got := map[string]int{}
	for len(got) < len(want) {
		d := crew.push()
		if _, ok := want[d.Message.ID]; ok && got[d.Message.ID] == 0 {
			got[d.Message.ID] = d.Attempt
		}
		// Answered, so that the window keeps moving.
		crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+d.Message.ID+`"`, ws.OpOK)
	}
	require.Equal(t, want, got, "nacked deliveries came back as their next attempt")
	// An empty list is no answer.
	crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageIds":[]`, pigeon.CodeBadRequest)
	crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageIds":"x"`, pigeon.CodeBadRequest)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","batch":"yes"`, pigeon.CodeBadRequest)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","window":-1`, pigeon.CodeInvalidArgument)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","window":10001`, pigeon.CodeInvalidArgument)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","ack":"sometimes"`, pigeon.CodeInvalidArgument)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","ack":"none"`, pigeon.CodeInvalidArgument)
}

// TestAtMostOnceOverWebSocket: deliveries of an at-most-once subscription
// need no answer, every message arrives once, and a failing handler's
// message is not delivered again.
func TestAtMostOnceOverWebSocket(t *testing.T) {
	v := newEnv(t, nil)
	pub := v.dial(t, "alice-token", []string{"chat.messages"})
	sub := v.dial(t, "bob-token", []string{"chat.messages"})
	var calls atomic.Int64
	all := make(chan struct{})
	const n = 300
	_, err := sub.Subscribe(context.Background(), "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		if calls.Add(1) == n {
			close(all)
		}
		return errors.New("failed, and never retried")
	}, pigeon.WithAtMostOnce())
	require.NoError(t, err)
	for i := range n {
		_, err := pub.Publish(context.Background(), &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `}`)})
		require.NoError(t, err)
	}
	<-all
	time.Sleep(100 * time.Millisecond)
	require.EqualValues(t, n, calls.Load(), "each message once")
}

// TestAtMostOnceFloodKeepsTheConnectionReading: an at-most-once handler
// that falls behind has deliveries dropped on the client, not the
// connection's reading stopped: a handler that publishes still gets its
// answer. A dropped delivery is done: after a Reconnect the subscription
// resumes after the last message received, dropped or not, so none comes
// twice and none that was dropped comes late.
func TestAtMostOnceFloodKeepsTheConnectionReading(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: -1})
	pub := v.dial(t, "alice-token", []string{"chat.messages"})
	sub := v.dial(t, "bob-token", []string{"chat.messages"})
	release := make(chan struct{})
	answered := make(chan error, 1)
	var side atomic.Uint64 // the sequence of the handler's publish, the last message before the Reconnect
	var calls atomic.Int64
	var mu sync.Mutex
	seen := map[uint64]int{}
	s, err := sub.Subscribe(context.Background(), "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		seen[d.Message.Sequence]++
		mu.Unlock()
		if calls.Add(1) == 1 {
			<-release
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			res, err := d.Session.Publish(pctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"side"}`)})
			if err == nil {
				side.Store(res.Message.Sequence)
			}
			answered <- err
		}
		return nil
	}, pigeon.WithAtMostOnce())
	require.NoError(t, err)
	ctx := context.Background()
	var last *ws.PendingPublish
	for i := range 6000 {
		p, err := pub.PublishAsync(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(i) + `}`)})
		require.NoError(t, err)
		last = p
	}
	flood, err := last.Wait(ctx)
	require.NoError(t, err)
	// The whole flood reaches the subscription while its handler is blocked,
	// so the client has to drop some: waiting a fixed 300 ms let a slow
	// machine release the handler before the flood came, and then nothing
	// was dropped.
	eventually(t, func() bool { return ws.ReceivedThrough(s) >= flood.Message.Sequence }, "the flood reached the subscription")
	close(release)
	require.NoError(t, <-answered, "the handler's publish was answered")
	handled := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	// Drained: every message up to the handler's own has reached the
	// subscription (queued or dropped), none waits in its queue, and the
	// count stands still a moment for a handler call in progress. Watching
	// the count alone would take a worker descheduled for 50 ms (-race on
	// a busy machine) for a drained queue, and deliveries still arriving
	// for the end of the flood would go uncounted in before.
	drained := func() bool { return ws.ReceivedThrough(s) >= side.Load() && ws.QueuedDeliveries(s) == 0 }
	eventually(t, func() bool {
		if !drained() {
			return false
		}
		n := handled()
		time.Sleep(50 * time.Millisecond)
		return drained() && handled() == n
	}, "the queue drained")
	before := handled()
	require.Less(t, before, 6001, "some deliveries were dropped")

	require.NoError(t, sub.Reconnect(ctx))
	p, err := pub.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"kind":"chat","room":"lobby","n":"after"}`)})
	require.NoError(t, err)
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return seen[p.Message.Sequence] == 1 }, "the message after the Reconnect")
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, before+1, len(seen), "only the message published after the Reconnect came: nothing dropped came late")
	for seq, n := range seen {
		require.Equal(t, 1, n, "sequence %d handled once", seq)
	}
}

// TestDeliverBatchFrames: a client that asks for batches gets its
// deliveries in deliver_batch frames, in order, every one once; a client
// that does not gets deliver frames.
func TestDeliverBatchFrames(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	bob := v.raw(t, "bob-token")
	bob.negotiate("chat.messages")
	carol := v.raw(t, "bob-token")
	carol.negotiate("chat.messages")
	sub := bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","window":512,"batch":true`, ws.OpSubscribed).Sub
	carol.ok(ws.OpSubscribe, `,"subject":"chat.messages","window":512`, ws.OpSubscribed)
	const n = 300
	var ids []string
	var msgs []string
	for i := range n {
		msgs = append(msgs, `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"kind":"chat","room":"lobby","n":`+strconv.Itoa(i)+`}}`)
	}
	for i := 0; i < n; i += 100 {
		f := alice.ok(ws.OpPublishBatch, `,"messages":[`+strings.Join(msgs[i:i+100], ",")+`]`, ws.OpDecisions)
		for _, r := range f.Results {
			ids = append(ids, r.Message.ID)
		}
	}
	var got []string
	frames := 0
	for len(got) < n {
		f := bob.push()
		require.Equal(t, ws.OpDeliverBatch, f.Op)
		require.Equal(t, sub, f.Sub)
		require.NotEmpty(t, f.Deliveries)
		frames++
		var batch []string
		for _, d := range f.Deliveries {
			require.Equal(t, 1, d.Attempt)
			batch = append(batch, d.Message.ID)
		}
		got = append(got, batch...)
		ok := bob.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":["`+strings.Join(batch, `","`)+`"]`, ws.OpOK)
		require.Empty(t, ok.NotPending)
	}
	require.Equal(t, ids, got, "every message once, in order")
	require.Less(t, frames, n, "several deliveries a frame")
	for range n {
		require.Equal(t, ws.OpDeliver, carol.push().Op, "a client that did not ask gets deliver frames")
	}
}

// TestAtMostOnceQueueIsBoundedInSize: an at-most-once subscriber whose
// handler is stuck keeps at most maxQueuedBytes (64 MiB) of data queued
// on the client, however few messages that is. Messages of about 512 KiB
// arrive while the first one's handler is stuck: 127 fit, the next 128
// are dropped (the client logs its 128th drop with the last), and once
// the handler returns it handles exactly what was kept.
func TestAtMostOnceQueueIsBoundedInSize(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: -1})
	var drops atomic.Int64
	logger := slog.New(handlerFunc(func(r slog.Record) {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "dropped" {
				drops.Store(int64(a.Value.Uint64()))
			}
			return true
		})
	}))
	sub := v.dial(t, "bob-token", []string{"chat.messages"}, ws.WithLogger(logger), ws.WithMaxFrame(4<<20))
	release, entered := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // registered after the session's: runs first, even when the test fails
	var handled atomic.Int64
	_, err := sub.Subscribe(context.Background(), "chat.messages", func(ctx context.Context, d *pigeon.Delivery) error {
		if handled.Add(1) == 1 {
			close(entered)
			<-release
		}
		return nil
	}, pigeon.WithAtMostOnce())
	require.NoError(t, err)
	pub, err := v.e.Connect(context.Background(), "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer pub.Close(context.Background())

	pad := strings.Repeat("x", 512<<10)
	data := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"kind":"chat","room":"lobby","n":"%04d","pad":"%s"}`, i, pad))
	}
	kept := (64 << 20) / len(data(0))
	require.Equal(t, 127, kept)
	const dropped = 128 // a power of two: the client logs it
	for i := range 1 + kept + dropped {
		_, err := pub.Publish(context.Background(), &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: data(i)})
		require.NoError(t, err)
		if i == 0 {
			<-entered
		}
	}
	eventually(t, func() bool { return drops.Load() == dropped }, "the client dropped what did not fit: %d", drops.Load())
	unblock()
	eventually(t, func() bool { return handled.Load() == int64(1+kept) }, "handled: %d", handled.Load())
	require.Equal(t, int64(1+kept), handled.Load(), "the first, then what was kept, and nothing else")
}

// handlerFunc is a slog.Handler that hands every record to fn.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }
