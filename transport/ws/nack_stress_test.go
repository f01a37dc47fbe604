package ws_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/ws"
)

// nackStormAckWait is the ack wait (the lease) of jobs.run in the nack
// storm: far longer than the test may run, so that a delivery that only a
// lease expiry can recover makes the test stall and fail.
const nackStormAckWait = 10 * time.Minute

// TestNackStormRedeliversPromptly: competing consumers nack every delivery
// twice with delayMs 0 and ack the third, while (in the churn cases)
// consumers keep leaving and joining. Every nacked message must come back
// at once, with consecutive attempt numbers, to a consumer that sees it: a
// delivery no handler saw must neither count as an attempt nor wait for
// the backoff or the lease to expire (both are an hour here, so such a
// delivery stalls the test).
func TestNackStormRedeliversPromptly(t *testing.T) {
	const msgs, nacks = 1000, 2
	for _, tc := range []struct {
		name      string
		consumers []string // "ws" or "local", one per consumer
		churn     bool     // consumers leave and are replaced meanwhile
	}{
		{"in process", []string{"local", "local", "local"}, false},
		{"websocket", []string{"ws", "ws", "ws"}, false},
		{"mixed", []string{"ws", "local", "ws"}, false},
		{"in process churn", []string{"local", "local", "local"}, true},
		{"websocket churn", []string{"ws", "ws", "ws"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{PublishRate: -1}, func(o *pigeon.Options) {
				o.RetryBase = time.Hour // the backoff: never within the test
				for i := range o.Catalog.Subjects {
					if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
						p.Delivery.AckWaitMs = nackStormAckWait.Milliseconds()
						p.Delivery.Retry.MaxAttempts = nacks + 3
						p.Delivery.Retry.MaxDelayMs = nackStormAckWait.Milliseconds()
					}
				}
			})
			ctx := context.Background()
			boss, err := v.e.Connect(ctx, "boss-token", []string{"jobs.run"})
			require.NoError(t, err)
			defer boss.Close(ctx)
			for i := range msgs {
				_, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
				require.NoError(t, err)
			}

			var (
				mu       sync.Mutex
				attempts = map[string][]int{}
				handled  atomic.Int64
				acked    atomic.Int64
			)
			handler := func(_ context.Context, d *pigeon.Delivery) error {
				mu.Lock()
				attempts[d.Message.ID] = append(attempts[d.Message.ID], d.Attempt)
				mu.Unlock()
				handled.Add(1)
				if d.Attempt <= nacks {
					return pigeon.RetryAfter(0, errors.New("not yet"))
				}
				acked.Add(1)
				return nil
			}
			// consume starts consumer i; stop ends it the way i picks:
			// unsubscribe, or close the whole session.
			type consumer struct {
				sess pigeon.Session
				sub  pigeon.Subscription
			}
			consume := func(i int) (consumer, error) {
				var (
					s   pigeon.Session
					err error
				)
				if tc.consumers[i] == "ws" {
					s, err = ws.Dial(ctx, v.url, "crew-token", []string{"jobs.run"})
				} else {
					s, err = v.e.Connect(ctx, "crew-token", []string{"jobs.run"})
				}
				if err != nil {
					return consumer{}, err
				}
				sub, err := s.Subscribe(ctx, "jobs.run", handler, pigeon.WithGroup("storm"), pigeon.WithMaxInFlight([]int{1, 4, 8}[i%3]))
				return consumer{s, sub}, err
			}
			// stop ends a consumer: by unsubscribing first (even n), or
			// by closing its session with the subscription running.
			stop := func(c consumer, n int) error {
				if n%2 == 0 {
					if err := c.sub.Unsubscribe(ctx); err != nil {
						return err
					}
				}
				return c.sess.Close(ctx)
			}
			consumers := make([]consumer, len(tc.consumers))
			for i := range consumers {
				consumers[i], err = consume(i)
				require.NoError(t, err)
			}
			churned := make(chan error, 1)
			go func() {
				var err error
				for n := 0; tc.churn && err == nil && acked.Load() < msgs; n++ {
					i := n % len(consumers)
					if err = stop(consumers[i], n); err == nil {
						consumers[i], err = consume(i)
					}
					for at := handled.Load(); err == nil && handled.Load() < at+5 && acked.Load() < msgs; {
						time.Sleep(time.Millisecond)
					}
				}
				churned <- err
			}()
			defer func() {
				for _, c := range consumers {
					if c.sess != nil {
						_ = c.sess.Close(ctx)
					}
				}
			}()

			progressing(t, func() bool { return acked.Load() == msgs }, handled.Load, func() string {
				return fmt.Sprintf("acked %d of %d after %d deliveries; group: %s; unfinished: %s",
					acked.Load(), msgs, handled.Load(), groupStateOf(t, v, "jobs.run", "storm"), unfinished(&mu, attempts, nacks+1))
			})
			require.NoError(t, <-churned)
			mu.Lock()
			require.Len(t, attempts, msgs)
			for id, got := range attempts {
				require.Equal(t, []int{1, 2, 3}, got, "attempts of %s", id)
			}
			mu.Unlock()
			require.Equal(t, int64(msgs*(nacks+1)), handled.Load(), "no delivery handled twice")
			eventually(t, func() bool {
				st, err := v.st.LoadGroup(ctx, store.GroupKey{Subject: "jobs.run", Group: "storm"})
				require.NoError(t, err)
				return st.Floor == msgs && len(st.Attempts) == 0
			}, "the group is done: %s", groupStateOf(t, v, "jobs.run", "storm"))
		})
	}
}

// progressing polls cond until it holds; it fails when progress (a counter
// that grows while work gets done) stands still for 15 s, reporting state.
func progressing(t testing.TB, cond func() bool, progress func() int64, state func() string) {
	t.Helper()
	last, since := progress(), time.Now()
	for !cond() {
		if p := progress(); p != last {
			last, since = p, time.Now()
		} else if time.Since(since) > 15*time.Second {
			t.Fatalf("no progress for 15 s: %s", state())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unfinished lists the messages handled fewer than want times, with their
// attempts.
func unfinished(mu *sync.Mutex, attempts map[string][]int, want int) string {
	mu.Lock()
	defer mu.Unlock()
	var out []string
	for id, a := range attempts {
		if len(a) < want {
			out = append(out, fmt.Sprintf("%s%v", id, a))
		}
	}
	sort.Strings(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("… (%d)", len(out)))
	}
	return fmt.Sprint(out)
}

// groupStateOf is the stored progress of a group of subject.
func groupStateOf(t testing.TB, v *env, subject, group string) string {
	st, err := v.st.LoadGroup(context.Background(), store.GroupKey{Subject: subject, Group: group})
	require.NoError(t, err)
	return fmt.Sprintf("floor %d, done %d, attempts %v", st.Floor, len(st.Done), st.Attempts)
}
