package pigeon_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

// evictFixture is an engine on the transport suite's catalog (chat.messages
// is pubsub) plus tasks.run, a work queue that boss publishes to and that
// alice and bob both receive from, with a one-second ack wait. Its clock
// moves only when the test advances it, so no lease runs out by itself.
func evictFixture(t *testing.T, mutate ...func(*pigeon.Options)) *fixture {
	return newFixture(t, append([]func(*pigeon.Options){func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog, o.Authenticator = base.Catalog, base.Authenticator
		both := []string{transporttest.Alice, transporttest.Bob}
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "tasks.run", Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"run"},
			Delivery: pigeon.DeliveryPolicy{AckWaitMs: 1000},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{transporttest.Boss}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: both}},
				pigeon.OpAck:     {{Effect: "allow", Principals: both}},
			},
		})
	}}, mutate...)...)
}

func task(n int) *pigeon.Message {
	return &pigeon.Message{Type: "task", Subject: "tasks.run", Intent: "run", Data: json.RawMessage(`{"n":` + strconv.Itoa(n) + `}`)}
}

// publishTasks publishes tasks from to to (inclusive) and returns their ids.
func publishTasks(t *testing.T, boss pigeon.Session, from, to int) []string {
	t.Helper()
	var ids []string
	for n := from; n <= to; n++ {
		r, err := boss.Publish(ctx, task(n))
		require.NoError(t, err)
		ids = append(ids, r.Message.ID)
	}
	return ids
}

// handled counts the deliveries each consumer group was handed, per
// message id.
type handled struct {
	mu sync.Mutex
	n  map[string]map[string]int // group → message id → deliveries
}

func newHandled() *handled { return &handled{n: map[string]map[string]int{}} }

func (h *handled) add(group, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[group] == nil {
		h.n[group] = map[string]int{}
	}
	h.n[group][id]++
}

// handler acknowledges every delivery, counting it under group.
func (h *handled) handler(group string) pigeon.Handler {
	return func(_ context.Context, d *pigeon.Delivery) error {
		h.add(group, d.Message.ID)
		return nil
	}
}

// ids lists the messages group was handed, each as often as it was.
func (h *handled) ids(group string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for id, n := range h.n[group] {
		for range n {
			out = append(out, id)
		}
	}
	return out
}

func (h *handled) count(group string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n[group])
}

// TestIdleGroupsLeaveTheCap: Options.MaxGroupsPerSubject counts the groups
// in use, not every group used since the engine started. A principal
// cycling through group names (subscribe, unsubscribe) leaves no group
// behind, so another principal can still start one; groups with a
// subscriber fill the cap, and one that goes idle frees its place.
func TestIdleGroupsLeaveTheCap(t *testing.T) {
	f := evictFixture(t, func(o *pigeon.Options) { o.MaxGroupsPerSubject = 3 })
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	for i := range 10 {
		g := "cycled-" + strconv.Itoa(i)
		sub, err := alice.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup(g))
		require.NoError(t, err, "group %s", g)
		require.True(t, f.e.GroupLoaded("tasks.run", g))
		require.NoError(t, sub.Unsubscribe(ctx))
		require.False(t, f.e.GroupLoaded("tasks.run", g), "group %s left with its subscriber", g)
	}

	var held []pigeon.Subscription
	for _, g := range []string{"b1", "b2", "b3"} {
		sub, err := bob.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup(g))
		require.NoError(t, err, "group %s: another principal starts groups after the cycling", g)
		held = append(held, sub)
	}
	_, err := alice.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup("late"))
	requireCode(t, err, pigeon.CodeTooManyGroups)
	sub, err := alice.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup("b2"))
	require.NoError(t, err, "a group in use takes another subscriber")
	require.NoError(t, sub.Unsubscribe(ctx))
	require.True(t, f.e.GroupLoaded("tasks.run", "b2"), "a group stays while a subscriber is left")

	require.NoError(t, held[0].Unsubscribe(ctx))
	_, err = alice.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup("late"))
	require.NoError(t, err, "an idle group frees its place")
}

// TestGroupProgressSurvivesEviction: a group that leaves memory with its
// last subscriber keeps its progress in the store; the next subscriber of
// the group, another principal, gets only what the group has not done,
// each message once.
func TestGroupProgressSurvivesEviction(t *testing.T) {
	f := evictFixture(t)
	boss := f.connect("boss-token", "tasks.run")
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	got := newHandled()

	first := publishTasks(t, boss, 1, 3)
	sub, err := alice.Subscribe(ctx, "tasks.run", got.handler("alice"), pigeon.WithGroup("mailers"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return got.count("alice") == 3 }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	require.ElementsMatch(t, first, got.ids("alice"))
	require.False(t, f.e.GroupLoaded("tasks.run", "mailers"), "the idle group left memory")

	second := publishTasks(t, boss, 4, 6)
	sub, err = bob.Subscribe(ctx, "tasks.run", got.handler("bob"), pigeon.WithGroup("mailers"), pigeon.WithMaxInFlight(4))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return got.count("bob") >= 3 }, 30*time.Second, time.Millisecond)
	third := publishTasks(t, boss, 7, 7) // delivered after the rest: nothing else is on its way
	require.Eventually(t, func() bool { return got.count("bob") == 4 }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub.Unsubscribe(ctx))
	require.ElementsMatch(t, append(second, third...), got.ids("bob"), "only what the group had not done, once each")
	require.False(t, f.e.GroupLoaded("tasks.run", "mailers"))
}

// TestGroupWithLeasesStays: a group whose last user left a lease in flight
// stays in memory, and the lease behaves as before: a pull lease runs out
// after the ack wait and the message comes back; a nack's delay holds the
// message back until it passes, and no longer than pigeon.MaxRetryDelay.
// Once settled, the group leaves.
func TestGroupWithLeasesStays(t *testing.T) {
	tests := []struct {
		name  string
		group string
		// leave takes a lease of the only task and leaves it in flight.
		leave func(t *testing.T, s pigeon.Session, id string)
		// wait is how long the lease holds the task back.
		wait time.Duration
	}{
		{"pull receive without ack", pigeon.DefaultGroup, func(t *testing.T, s pigeon.Session, id string) {
			msgs, err := s.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.Equal(t, id, msgs[0].ID)
		}, time.Second},
		{"pull nack with a delay", pigeon.DefaultGroup, func(t *testing.T, s pigeon.Session, id string) {
			msgs, err := s.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.NoError(t, s.Nack(ctx, "tasks.run", id, time.Minute))
		}, time.Minute},
		{"pull nack above the longest delay", pigeon.DefaultGroup, func(t *testing.T, s pigeon.Session, id string) {
			msgs, err := s.Receive(ctx, "tasks.run", 5)
			require.NoError(t, err)
			require.Len(t, msgs, 1)
			require.NoError(t, s.Nack(ctx, "tasks.run", id, 1000*time.Hour))
		}, pigeon.MaxRetryDelay}, // a session's nack is shortened to the longest delay, as a push nack is
		{"push nack with a delay", "mailers", pushNack(time.Minute), time.Minute},
		{"push nack above the longest delay", "mailers", pushNack(1000 * time.Hour), pigeon.MaxRetryDelay},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Contracts outlive the longest wait.
			f := evictFixture(t, func(o *pigeon.Options) { o.ContractTTL = pigeon.DefaultMaxContractTTL })
			boss := f.connect("boss-token", "tasks.run")
			alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
			id := publishTasks(t, boss, 1, 1)[0]
			tc.leave(t, alice, id)
			require.True(t, f.e.GroupLoaded("tasks.run", tc.group), "a group with a lease in flight stays")

			got := newHandled()
			var sub pigeon.Subscription
			if tc.group == pigeon.DefaultGroup {
				msgs, err := bob.Receive(ctx, "tasks.run", 5)
				require.NoError(t, err)
				require.Empty(t, msgs, "held back by the lease")
			} else {
				var err error
				sub, err = bob.Subscribe(ctx, "tasks.run", got.handler("bob"), pigeon.WithGroup(tc.group))
				require.NoError(t, err)
				time.Sleep(100 * time.Millisecond) // the subscriber's loop looks at the group more than once
				require.Zero(t, got.count("bob"), "held back by the lease")
			}

			f.clock.Advance(tc.wait)
			if sub == nil {
				msgs, err := bob.Receive(ctx, "tasks.run", 5)
				require.NoError(t, err)
				require.Len(t, msgs, 1, "the lease ran out: the task is back")
				require.Equal(t, id, msgs[0].ID)
				require.NoError(t, bob.Ack(ctx, "tasks.run", id))
			} else {
				require.Eventually(t, func() bool { return got.count("bob") == 1 }, 30*time.Second, time.Millisecond, "the delay passed: the task is back")
				require.Equal(t, []string{id}, got.ids("bob"))
				require.NoError(t, sub.Unsubscribe(ctx))
			}
			require.False(t, f.e.GroupLoaded("tasks.run", tc.group), "settled, the group leaves")
		})
	}
}

// pushNack subscribes s to group mailers with a handler that nacks the
// task with RetryAfter(delay), waits for that, and unsubscribes.
func pushNack(delay time.Duration) func(t *testing.T, s pigeon.Session, id string) {
	return func(t *testing.T, s pigeon.Session, id string) {
		nacked := make(chan string, 1)
		sub, err := s.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
			nacked <- d.Message.ID
			return pigeon.RetryAfter(delay, nil)
		}, pigeon.WithGroup("mailers"))
		require.NoError(t, err)
		select {
		case got := <-nacked:
			require.Equal(t, id, got)
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
		require.NoError(t, sub.Unsubscribe(ctx))
	}
}

// TestGivenBackWorkLeavesWithTheGroup: deliveries a consumer never got
// (ErrUndelivered, as a transport answers when its connection goes) go
// back to the group uncounted, in the store too, so they do not keep the
// group in memory; the next subscriber gets them as first attempts, even
// where one attempt is all a message has.
func TestGivenBackWorkLeavesWithTheGroup(t *testing.T) {
	f := evictFixture(t, func(o *pigeon.Options) {
		for i := range o.Catalog.Subjects {
			if o.Catalog.Subjects[i].Name == "tasks.run" {
				o.Catalog.Subjects[i].Delivery.Retry.MaxAttempts = 1
			}
		}
	})
	boss := f.connect("boss-token", "tasks.run")
	bob := f.connect("bob-token", "tasks.run")
	ids := publishTasks(t, boss, 1, 3)

	alice := f.connect("alice-token", "tasks.run")
	p, err := f.e.Authenticate(ctx, "alice-token")
	require.NoError(t, err)
	type held struct {
		ctx     context.Context
		attempt int
		done    func(error)
	}
	deliveries := make(chan held, len(ids))
	sub, err := f.e.SubscribeAsync(ctx, pigeon.Caller{Principal: p, ContractID: alice.Contract().ID(), Region: "uk"}, "tasks.run",
		func(ctx context.Context, d *pigeon.Delivery, done func(error)) {
			deliveries <- held{ctx, d.Attempt, done}
		},
		pigeon.WithGroup("relay"), pigeon.WithMaxInFlight(len(ids)))
	require.NoError(t, err)
	var window []held
	for range ids {
		select {
		case h := <-deliveries:
			require.Equal(t, 1, h.attempt)
			window = append(window, h)
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}
	gone := make(chan error, 1)
	go func() { gone <- sub.Unsubscribe(ctx) }()
	<-window[0].ctx.Done() // stopped: nothing more is handed over
	for _, h := range window {
		h.done(pigeon.ErrUndelivered) // the connection went before they were sent
	}
	require.NoError(t, <-gone)
	require.False(t, f.e.GroupLoaded("tasks.run", "relay"), "work given back keeps no group in memory")

	var mu sync.Mutex
	attempts := map[string]int{}
	sub2, err := bob.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		attempts[d.Message.ID] = d.Attempt
		return nil
	}, pigeon.WithGroup("relay"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) == len(ids) }, 30*time.Second, time.Millisecond)
	require.NoError(t, sub2.Unsubscribe(ctx))
	for _, id := range ids {
		require.Equal(t, 1, attempts[id], "task %s: the given-back attempt did not count", id)
	}
}

// TestGroupsWhoseLeasesRanOutFreeTheCap: a group left with a nacked
// message counts toward the cap while the nack's delay holds it back;
// once the delay has passed, a subscription that finds the subject at its
// cap takes that group out of memory and starts its own. The nacked
// message is still the group's, on its next attempt.
func TestGroupsWhoseLeasesRanOutFreeTheCap(t *testing.T) {
	f := evictFixture(t, func(o *pigeon.Options) { o.MaxGroupsPerSubject = 1 })
	boss := f.connect("boss-token", "tasks.run")
	alice, bob := f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")
	id := publishTasks(t, boss, 1, 1)[0]
	nacked := make(chan struct{}, 1)
	sub, err := alice.Subscribe(ctx, "tasks.run", func(context.Context, *pigeon.Delivery) error {
		nacked <- struct{}{}
		return pigeon.RetryAfter(time.Minute, nil)
	}, pigeon.WithGroup("slow"))
	require.NoError(t, err)
	select {
	case <-nacked:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	require.NoError(t, sub.Unsubscribe(ctx))
	require.True(t, f.e.GroupLoaded("tasks.run", "slow"), "the nack's delay holds the group")
	_, err = bob.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup("other"))
	requireCode(t, err, pigeon.CodeTooManyGroups)

	f.clock.Advance(time.Minute)
	other, err := bob.Subscribe(ctx, "tasks.run", nopHandler, pigeon.WithGroup("other"))
	require.NoError(t, err, "the delay passed: the idle group gave up its place")
	require.False(t, f.e.GroupLoaded("tasks.run", "slow"))
	require.NoError(t, other.Unsubscribe(ctx))

	got := make(chan *pigeon.Delivery, 1)
	sub, err = bob.Subscribe(ctx, "tasks.run", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d
		return nil
	}, pigeon.WithGroup("slow"))
	require.NoError(t, err)
	select {
	case d := <-got:
		require.Equal(t, id, d.Message.ID)
		require.Equal(t, 2, d.Attempt, "the nacked attempt counted")
	case <-time.After(10 * time.Second):
		t.Fatal("the nacked task did not come back")
	}
	require.NoError(t, sub.Unsubscribe(ctx))
}

// TestPullCursorsLeaveTheTable: a principal's pull cursor on a pubsub
// subject is in memory only while a receive runs; the next receive
// continues where the last one stopped.
func TestPullCursorsLeaveTheTable(t *testing.T) {
	f := evictFixture(t)
	alice, bob := f.connect("alice-token", "chat.messages"), f.connect("bob-token", "chat.messages")
	var ids []string
	for i := range 5 {
		r, err := alice.Publish(ctx, chat(i))
		require.NoError(t, err)
		ids = append(ids, r.Message.ID)
	}
	cursor := "cursor:" + transporttest.Bob
	var got []string
	for _, want := range [][]string{ids[:2], ids[2:4], ids[4:], nil} {
		msgs, err := bob.Receive(ctx, "chat.messages", 2)
		require.NoError(t, err)
		var page []string
		for _, m := range msgs {
			page = append(page, m.ID)
		}
		require.Equal(t, want, page)
		got = append(got, page...)
		require.False(t, f.e.GroupLoaded("chat.messages", cursor), "the cursor left memory")
	}
	require.Equal(t, ids, got)
}

// TestPullCursorPastTrimmedMessages: a pull cursor that retention left
// behind (messages it never read were trimmed), or that starts on a
// subject whose first messages were trimmed, hands out each retained
// message once and moves on, in memory and after leaving it.
func TestPullCursorPastTrimmedMessages(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { require.NoError(t, st.Close(ctx)) })
	f := evictFixture(t, func(o *pigeon.Options) { o.Store = st })
	alice := f.connect("alice-token", "chat.messages")
	publish := func(n int) []string {
		var ids []string
		for range n {
			r, err := alice.Publish(ctx, chat(0))
			require.NoError(t, err)
			ids = append(ids, r.Message.ID)
		}
		return ids
	}
	receive := func(s pigeon.Session) []string {
		msgs, err := s.Receive(ctx, "chat.messages", 2)
		require.NoError(t, err)
		var ids []string
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		return ids
	}
	bob := f.connect("bob-token", "chat.messages")
	first := publish(2)
	require.Equal(t, first, receive(bob))
	publish(1) // trimmed before bob reads it
	f.clock.Advance(time.Second)
	rest := publish(5)
	_, err := st.TrimBefore(ctx, "chat.messages", f.clock.Now())
	require.NoError(t, err)

	for _, s := range []pigeon.Session{bob, alice} { // behind, and new
		require.Equal(t, rest[:2], receive(s))
		require.Equal(t, rest[2:4], receive(s))
		require.Equal(t, rest[4:], receive(s))
		require.Empty(t, receive(s))
	}
}

// TestGroupsUnderChurn: subscribers join and leave the same groups while
// tasks are published and pull receivers take and ack them. Every group
// is handed every task exactly once — the clock stands still, so no lease
// runs out, and a task handed to two consumers at once would show — and
// once all is done no group is left in memory.
func TestGroupsUnderChurn(t *testing.T) {
	f := evictFixture(t)
	boss := f.connect("boss-token", "tasks.run")
	sessions := []pigeon.Session{f.connect("alice-token", "tasks.run"), f.connect("bob-token", "tasks.run")}
	const tasks = 400
	groups := []string{"g0", "g1"}
	got := newHandled()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for gi, g := range groups {
		for w := range 2 { // two members that come and go: the group is often left with none
			s := sessions[(gi+w)%len(sessions)]
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					sub, err := s.Subscribe(ctx, "tasks.run", got.handler(g), pigeon.WithGroup(g), pigeon.WithMaxInFlight(1+(w+i)%3))
					if err != nil {
						fail(err)
						return
					}
					time.Sleep(time.Duration((w+i)%3) * time.Millisecond)
					if err := sub.Unsubscribe(ctx); err != nil {
						fail(err)
						return
					}
					time.Sleep(time.Duration((w+i)%2) * time.Millisecond)
				}
			})
		}
	}
	for _, s := range sessions {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				msgs, err := s.Receive(ctx, "tasks.run", 3)
				if err != nil {
					fail(err)
					return
				}
				for _, m := range msgs {
					got.add(pigeon.DefaultGroup, m.ID)
					if err := s.Ack(ctx, "tasks.run", m.ID); err != nil {
						fail(err)
						return
					}
				}
				if len(msgs) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	ids := make([]string, 0, tasks)
	for n := range tasks {
		ids = append(ids, publishTasks(t, boss, n, n)...)
	}
	all := append(slices.Clone(groups), pigeon.DefaultGroup)
	require.Eventually(t, func() bool {
		if len(errs) > 0 {
			return true // reported below
		}
		for _, g := range all {
			if got.count(g) < tasks {
				return false
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, g := range all {
		require.ElementsMatch(t, ids, got.ids(g), "group %s is handed every task once", g)
		require.False(t, f.e.GroupLoaded("tasks.run", g), "group %s is done and left memory", g)
	}
}
