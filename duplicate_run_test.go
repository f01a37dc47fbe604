package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// dupAckWait is the ack wait of the subjects in these tests: every slow
// handler below runs for many of them.
const dupAckWait = 20 * time.Millisecond

// dupSlow is how long a slow handler runs: twenty ack waits.
const dupSlow = 20 * dupAckWait

// runLog records the runs of one subscription's handler per message id:
// how many run at once and how many ran in all.
type runLog struct {
	mu      sync.Mutex
	running map[string]int
	runs    map[string]int
	overlap []string // ids that ran twice at once
	started chan string
}

func newRunLog() *runLog {
	return &runLog{running: map[string]int{}, runs: map[string]int{}, started: make(chan string, 64)}
}

func (r *runLog) enter(id string) {
	r.mu.Lock()
	r.running[id]++
	r.runs[id]++
	if r.running[id] > 1 {
		r.overlap = append(r.overlap, id)
	}
	r.mu.Unlock()
	select {
	case r.started <- id:
	default: // nobody waits for so many starts
	}
}

func (r *runLog) leave(id string) {
	r.mu.Lock()
	r.running[id]--
	r.mu.Unlock()
}

// count is how many runs id had, and how many were running.
func (r *runLog) count(id string) (runs, running int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id], r.running[id]
}

// holding is a handler that logs its runs and holds each until release
// is closed.
func (r *runLog) holding(release <-chan struct{}) pigeon.Handler {
	return func(_ context.Context, d *pigeon.Delivery) error {
		r.enter(d.Message.ID)
		defer r.leave(d.Message.ID)
		<-release
		return nil
	}
}

func (r *runLog) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlap...)
}

// dupOptions are transporttest.Options with an ack wait of dupAckWait on
// every subject of the suite.
func dupOptions() *pigeon.Options {
	o := transporttest.Options()
	for i := range o.Catalog.Subjects {
		o.Catalog.Subjects[i].Delivery.AckWaitMs = dupAckWait.Milliseconds()
	}
	return o
}

func dupEngine(t *testing.T) *pigeon.Engine {
	t.Helper()
	e, err := pigeon.New(context.Background(), dupOptions())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return e
}

func dupConnect(t *testing.T, e *pigeon.Engine, token, subject string) pigeon.Session {
	t.Helper()
	s, err := e.Connect(context.Background(), token, []string{subject})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// dupCase is a subject with acknowledgements, its publisher and receiver.
type dupCase struct {
	name, subject, pub, sub string
	msg                     func(n int) *pigeon.Message
}

var dupCases = []dupCase{
	{"work queue", "jobs.run", "boss-token", "crew-token", func(n int) *pigeon.Message {
		return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}
	}},
	{"pubsub", "chat.messages", "alice-token", "bob-token", func(n int) *pigeon.Message {
		return &pigeon.Message{Type: "chat.message", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"kind":"chat","room":"lobby","n":` + strconv.Itoa(n) + `}`)}
	}},
}

// publishN publishes messages n = from … to-1 of c and returns their ids.
func publishN(t *testing.T, s pigeon.Session, c dupCase, from, to int) []string {
	t.Helper()
	var ids []string
	for n := from; n < to; n++ {
		r, err := s.Publish(context.Background(), c.msg(n))
		require.NoError(t, err)
		ids = append(ids, r.Message.ID)
	}
	return ids
}

// waitStarted waits until the handler started a run of id.
func waitStarted(t *testing.T, r *runLog, id string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-r.started:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("the handler never started on %s", id)
		}
	}
}

// slowRunScenario is a run past the ack wait, of a handler or of an
// asynchronous delivery: the first message's handler runs for twenty ack
// waits while the subscription has free workers, which handle later
// messages meanwhile. The message is never handed to the subscription
// again while its run goes on (on one node a lease is held for as long
// as an in-process handler runs; a pubsub subscription hands a message
// again only after its handler answered),
// and, acknowledged, never again at all.
func slowRunScenario(t *testing.T, c dupCase, subscribe func(e *pigeon.Engine, sess pigeon.Session, slow func(id string) bool, log *runLog) pigeon.Subscription) {
	e := dupEngine(t)
	pub := dupConnect(t, e, c.pub, c.subject)
	recv := dupConnect(t, e, c.sub, c.subject)
	log := newRunLog()
	var slowID string
	var slowMu sync.Mutex
	isSlow := func(id string) bool { slowMu.Lock(); defer slowMu.Unlock(); return id == slowID }
	sub := subscribe(e, recv, isSlow, log)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })

	// The fan-out must have the subscription before the first publish.
	time.Sleep(20 * time.Millisecond)
	slowMu.Lock()
	slowID = publishN(t, pub, c, 0, 1)[0]
	slowMu.Unlock()
	waitStarted(t, log, slowID)
	others := publishN(t, pub, c, 1, 4)
	for _, id := range others {
		require.Eventually(t, func() bool { n, running := log.count(id); return n == 1 && running == 0 }, 10*time.Second, time.Millisecond,
			"the subscription's free workers never handled %s while the slow run went on", id)
	}
	_, running := log.count(slowID)
	require.Equal(t, 1, running, "the slow run ended too soon for the test to say anything")
	require.Eventually(t, func() bool { _, running := log.count(slowID); return running == 0 }, 10*time.Second, time.Millisecond)
	time.Sleep(5 * dupAckWait) // a redelivery, if any, comes within a few ack waits
	require.Empty(t, log.overlaps(), "one message's handler ran twice at once on one subscription")
	n, _ := log.count(slowID)
	require.Equal(t, 1, n, "the message was handed out again though its handler ran and acknowledged it")
}

// A handler that runs far past its message's ack wait, with free workers
// (WithMaxInFlight(8)), is never run a second time on the same message
// meanwhile: not on a work queue (the lease of an in-process handler's
// message does not run out while the handler runs) nor on a pubsub
// subject with acknowledgements (a redelivery follows only the handler's
// failure).
func TestAHandlerPastItsAckWaitIsNotRunAgainMeanwhile(t *testing.T) {
	for _, c := range dupCases {
		t.Run(c.name, func(t *testing.T) {
			slowRunScenario(t, c, func(e *pigeon.Engine, sess pigeon.Session, slow func(string) bool, log *runLog) pigeon.Subscription {
				sub, err := sess.Subscribe(context.Background(), c.subject, func(_ context.Context, d *pigeon.Delivery) error {
					log.enter(d.Message.ID)
					defer log.leave(d.Message.ID)
					if slow(d.Message.ID) {
						time.Sleep(dupSlow)
					}
					return nil
				}, pigeon.WithMaxInFlight(8))
				require.NoError(t, err)
				return sub
			})
		})
	}
}

// The asynchronous handler form (Engine.SubscribeAsync, a transport's):
// a delivery is running until its done is called, and the engine hands
// the message to that subscription again only after done, however long
// past the ack wait it comes. (A transport that gives up on its client at
// the ack wait calls done itself; the client then keeps one run per
// message: docs/security.md, the Go and TypeScript clients.)
func TestAnAsyncDeliveryPastItsAckWaitIsNotHandedOverAgainMeanwhile(t *testing.T) {
	for _, c := range dupCases {
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			slowRunScenario(t, c, func(e *pigeon.Engine, sess pigeon.Session, slow func(string) bool, log *runLog) pigeon.Subscription {
				caller := sess.(interface{ Caller() pigeon.Caller }).Caller()
				sub, err := e.SubscribeAsync(context.Background(), caller, c.subject, func(_ context.Context, d *pigeon.Delivery, done func(error)) {
					id := d.Message.ID
					log.enter(id)
					wg.Add(1)
					go func() {
						defer wg.Done()
						if slow(id) {
							time.Sleep(dupSlow)
						}
						log.leave(id)
						done(nil)
					}()
				}, pigeon.WithMaxInFlight(8))
				require.NoError(t, err)
				return sub
			})
		})
	}
}

// A handler that fails asking for no delay (RetryAfter(0)),
// while the subscription's other workers are free, gets its message
// again only once its run has returned: the failure is its answer, so
// the redelivery cannot start before the run it answers ends.
func TestANackWithNoDelayRunsAgainOnlyAfterTheRunEnds(t *testing.T) {
	for _, c := range dupCases {
		t.Run(c.name, func(t *testing.T) {
			e := dupEngine(t)
			pub := dupConnect(t, e, c.pub, c.subject)
			recv := dupConnect(t, e, c.sub, c.subject)
			log := newRunLog()
			var mu sync.Mutex
			attempts := map[string][]int{}
			sub, err := recv.Subscribe(context.Background(), c.subject, func(_ context.Context, d *pigeon.Delivery) error {
				id := d.Message.ID
				log.enter(id)
				defer log.leave(id)
				mu.Lock()
				attempts[id] = append(attempts[id], d.Attempt)
				mu.Unlock()
				if d.Attempt == 1 {
					time.Sleep(3 * dupAckWait) // past the ack wait, then a nack due at once
					return pigeon.RetryAfter(0, errors.New("again, now"))
				}
				return nil
			}, pigeon.WithMaxInFlight(8))
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
			time.Sleep(20 * time.Millisecond)
			ids := publishN(t, pub, c, 0, 4)
			for _, id := range ids {
				require.Eventually(t, func() bool { n, running := log.count(id); return n == 2 && running == 0 }, 10*time.Second, time.Millisecond,
					"%s was not run twice, one after the other", id)
			}
			time.Sleep(5 * dupAckWait)
			require.Empty(t, log.overlaps(), "one message's handler ran twice at once on one subscription")
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				require.Equal(t, []int{1, 2}, attempts[id], "message %s", id)
			}
		})
	}
}

// In a cluster whose Cluster cannot extend leases (this test's hub has no
// pigeon.LeaseExtender) a lease ends at the ack wait for the other nodes,
// which may then hand the message to their own consumers (docs/cluster.md;
// store/jetstream extends it while the handler runs); the node whose
// handler runs still holds it, so that subscription never runs the
// message twice at once however many of its workers are free.
func TestASlowHandlerInAClusterIsNotRunAgainMeanwhile(t *testing.T) {
	h := &hub{leases: map[string]*hubLease{}}
	st := memory.New(nil)
	var es [2]*pigeon.Engine
	for i := range es {
		o := dupOptions()
		o.Store, o.Cluster = nodeStore{Store: st, audit: memory.New(nil)}, h.node()
		e, err := pigeon.New(context.Background(), o)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
		es[i] = e
	}
	c := dupCases[0]
	pub := dupConnect(t, es[1], c.pub, c.subject)
	recv := dupConnect(t, es[0], c.sub, c.subject)
	log := newRunLog()
	sub, err := recv.Subscribe(context.Background(), c.subject, func(_ context.Context, d *pigeon.Delivery) error {
		log.enter(d.Message.ID)
		defer log.leave(d.Message.ID)
		time.Sleep(dupSlow)
		return nil
	}, pigeon.WithMaxInFlight(8))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	id := publishN(t, pub, c, 0, 1)[0]
	waitStarted(t, log, id)
	require.Eventually(t, func() bool { _, running := log.count(id); return running == 0 }, 10*time.Second, time.Millisecond)
	time.Sleep(5 * dupAckWait)
	require.Empty(t, log.overlaps(), "one message's handler ran twice at once on one subscription")
	n, _ := log.count(id)
	require.Equal(t, 1, n)
}

// A subscription's lease is marked held-while-running in the same step
// that takes it. Before, it was marked after the group was let go: in
// between, a lease whose ack wait had already passed (a short ack wait, a
// busy machine) could be taken by another consumer of the group (a pull
// receive here), and the subscription then marked that consumer's lease
// as its own running handler's: both ran the message at once, and the
// pull consumer's lease never ran out, so a message it dropped stayed
// leased for ever. The clock here moves two milliseconds at each look,
// past the 1 ms ack wait, so every lease not held by a running handler
// has run out by the next look.
func TestALeaseIsHeldFromTheMomentItIsTaken(t *testing.T) {
	o := dupOptions()
	for i := range o.Catalog.Subjects {
		o.Catalog.Subjects[i].Delivery.AckWaitMs = 1
		o.Catalog.Subjects[i].Delivery.Retry.MaxAttempts = 1 << 20
	}
	var ticks atomic.Int64
	t0 := time.Now()
	o.Now = func() time.Time { return t0.Add(time.Duration(ticks.Add(1)) * 2 * time.Millisecond) }
	e, err := pigeon.New(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	c := dupCases[0]
	pub := dupConnect(t, e, c.pub, c.subject)
	recv := dupConnect(t, e, c.sub, c.subject)
	puller := dupConnect(t, e, c.sub, c.subject)
	sub, err := recv.Subscribe(context.Background(), c.subject, func(context.Context, *pigeon.Delivery) error { return nil }, pigeon.WithMaxInFlight(4))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // takes what it can and drops it, never answering
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = puller.Receive(context.Background(), c.subject, 4)
		}
	}()
	publishN(t, pub, c, 0, 2000)
	close(stop)
	wg.Wait()
	require.Eventually(t, func() bool {
		st, err := e.Stats(context.Background())
		require.NoError(t, err)
		for _, g := range st.Groups {
			if g.Subject == c.subject && (g.InFlight > 0 || g.Lag > 0) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "a message stayed leased to a consumer that dropped it")
}
