//go:build stress

package ws_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// The stress tests open 1,000 WebSocket sessions at once; each publishes
// and each receives. Run with:
//
//	go test -tags stress -run Stress -v ./transport/ws
const stressConns, stressPerConn = 1000, 20

// TestStressThousandConnectionsPubSub: connection i subscribes to room i of
// chat.messages (a selector) and publishes to room i+1, so every message
// goes to exactly one other connection.
func TestStressThousandConnectionsPubSub(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: -1}, manyContracts)
	stress(t, v, "bob-token", "chat.messages",
		func(i int) []pigeon.SubscribeOption {
			return []pigeon.SubscribeOption{pigeon.WithSelector("/kind=chat/room=r" + strconv.Itoa(i)), pigeon.WithMaxInFlight(4)}
		},
		func(i, j int) *pigeon.Message {
			room := "r" + strconv.Itoa((i+1)%stressConns)
			return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
				Data: []byte(`{"kind":"chat","room":"` + room + `","n":` + strconv.Itoa(j) + `}`)}
		})
}

// TestStressThousandConnectionsWorkQueue: every connection publishes jobs
// and competes for them in one work-queue group.
func TestStressThousandConnectionsWorkQueue(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: -1}, manyContracts, func(o *pigeon.Options) {
		for i := range o.Catalog.Subjects {
			if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
				p.Delivery.AckWaitMs = 60000 // keep redelivery out of the count
				for _, op := range []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive, pigeon.OpAck} {
					p.Policy[op] = []pigeon.RuleSpec{{Effect: "allow", Principals: []string{"spiffe://jobs/crew"}}}
				}
			}
		}
	})
	stress(t, v, "crew-token", "jobs.run",
		func(int) []pigeon.SubscribeOption {
			return []pigeon.SubscribeOption{pigeon.WithGroup("all"), pigeon.WithMaxInFlight(4)}
		},
		func(i, j int) *pigeon.Message {
			return &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run",
				Data: []byte(`{"conn":` + strconv.Itoa(i) + `,"n":` + strconv.Itoa(j) + `}`)}
		})
}

func stress(t *testing.T, v *env, token, subject string, subOpts func(i int) []pigeon.SubscribeOption, msg func(i, j int) *pigeon.Message) {
	ctx := context.Background()
	var handled sync.Map
	var delivered, dups atomic.Int64

	start := time.Now()
	sessions := make([]*ws.Session, stressConns)
	var wg sync.WaitGroup
	errs := make(chan error, stressConns)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := ws.Dial(ctx, v.url, token, []string{subject})
			if err != nil {
				errs <- err
				return
			}
			sessions[i] = s
			_, err = s.Subscribe(ctx, subject, func(_ context.Context, d *pigeon.Delivery) error {
				if _, loaded := handled.LoadOrStore(d.Message.ID, true); loaded {
					dups.Add(1)
				}
				delivered.Add(1)
				return nil
			}, subOpts(i)...)
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	connected := time.Since(start)
	require.Equal(t, int64(stressConns), v.srv.Stats().Open)

	start = time.Now()
	var pubLat atomic.Int64
	for i, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range stressPerConn {
				t0 := time.Now()
				if _, err := s.Publish(ctx, msg(i, j)); err != nil {
					t.Error(err)
					return
				}
				pubLat.Add(int64(time.Since(t0)))
			}
		}()
	}
	wg.Wait()
	pubDone := time.Since(start)
	total := int64(stressConns * stressPerConn)
	eventually(t, func() bool { return delivered.Load() >= total }, "delivered %d of %d", delivered.Load(), total)
	allDone := time.Since(start)
	require.Zero(t, dups.Load(), "no message handled twice")
	n := 0
	handled.Range(func(any, any) bool { n++; return true })
	require.Equal(t, int(total), n)

	t.Logf("%d connections up (dial, authenticate, negotiate, subscribe) in %v", stressConns, connected.Round(time.Millisecond))
	t.Logf("%d publishes in %v (%.0f/s), mean publish round trip %v", total, pubDone.Round(time.Millisecond),
		float64(total)/pubDone.Seconds(), (time.Duration(pubLat.Load()) / time.Duration(total)).Round(time.Microsecond))
	t.Logf("all %d delivered and acked after %v (%.0f/s end to end)", total, allDone.Round(time.Millisecond), float64(total)/allDone.Seconds())

	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Close(cctx)
		}()
	}
	wg.Wait()
	eventually(t, func() bool { return v.srv.Stats().Open == 0 }, "all closed")
}
