package ws_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// bossReceivesJobs lets the boss receive and ack jobs.run too, so that a
// job can be leased to a consumer of another principal than crew.
func bossReceivesJobs(o *pigeon.Options) {
	for i := range o.Catalog.Subjects {
		if p := &o.Catalog.Subjects[i]; p.Name == "jobs.run" {
			for _, op := range []pigeon.Operation{pigeon.OpReceive, pigeon.OpAck} {
				p.Policy[op] = append(p.Policy[op], pigeon.RuleSpec{Effect: "allow", Principals: []string{transporttest.Boss}})
			}
		}
	}
}

// TestLatePullAnswerLeavesTheNewerLease: a crew consumer receives a job
// over a real WebSocket and answers it only after its lease ran out
// (jobs.run's ack wait, 300 ms) and the job was leased again: pulled by a
// consumer of another principal, or pushed to a subscription of crew's on
// another connection. The late answer, by id alone (protocol v1) or naming
// the sequence, is ACK_NOT_ALLOWED and settles nothing: the newer holder
// gives the job back and gets it a third time.
func TestLatePullAnswerLeavesTheNewerLease(t *testing.T) {
	answers := []struct {
		name   string
		answer func(ctx context.Context, s *ws.Session, m *pigeon.Message) error
	}{
		{"Ack", func(ctx context.Context, s *ws.Session, m *pigeon.Message) error { return s.Ack(ctx, "jobs.run", m.ID) }},
		{"Nack", func(ctx context.Context, s *ws.Session, m *pigeon.Message) error {
			return s.Nack(ctx, "jobs.run", m.ID, 0)
		}},
		{"AckSequence", func(ctx context.Context, s *ws.Session, m *pigeon.Message) error {
			return s.AckSequence(ctx, "jobs.run", m.ID, m.Sequence)
		}},
		{"NackSequence", func(ctx context.Context, s *ws.Session, m *pigeon.Message) error {
			return s.NackSequence(ctx, "jobs.run", m.ID, m.Sequence, 0)
		}},
	}
	// newer leases the job again once the crew's lease lapsed, lets the
	// test answer late (lateAnswer), then gives it back and waits for the
	// third attempt.
	newers := []struct {
		name  string
		newer func(t *testing.T, v *env, id string, lateAnswer func())
	}{
		{"PulledByAnotherPrincipal", func(t *testing.T, v *env, id string, lateAnswer func()) {
			ctx := context.Background()
			other := v.dial(t, "boss-token", []string{"jobs.run"})
			receive := func(attempt int) {
				t.Helper()
				eventually(t, func() bool {
					got, err := other.Receive(ctx, "jobs.run", 1)
					require.NoError(t, err)
					return len(got) == 1 && got[0].ID == id
				}, "attempt %d of %s", attempt, id)
			}
			receive(2)
			lateAnswer()
			require.NoError(t, other.Nack(ctx, "jobs.run", id, 0), "the newer lease is still the other principal's")
			receive(3)
			require.NoError(t, other.Ack(ctx, "jobs.run", id))
		}},
		{"PushedToTheSamePrincipal", func(t *testing.T, v *env, id string, lateAnswer func()) {
			ctx := context.Background()
			crew := v.dial(t, "crew-token", []string{"jobs.run"})
			attempts := make(chan int, 4)
			answered := make(chan struct{})
			release := sync.OnceFunc(func() { close(answered) })
			sub, err := crew.Subscribe(ctx, "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
				attempts <- d.Attempt
				if d.Attempt == 2 {
					// Held until the late answer was refused. Should
					// the lease lapse meanwhile, attempt 3 comes all
					// the same: only a settled job never comes back.
					<-answered
					return pigeon.RetryAfter(0, errors.New("once more"))
				}
				return nil
			})
			require.NoError(t, err)
			defer func() { require.NoError(t, sub.Unsubscribe(ctx)) }()
			defer release() // first: a failed check must not leave the handler waiting
			next := func() int {
				t.Helper()
				select {
				case n := <-attempts:
					return n
				case <-time.After(30 * time.Second):
					t.Fatal("no delivery")
					return 0
				}
			}
			require.Equal(t, 2, next())
			lateAnswer()
			release()
			require.Equal(t, 3, next(), "the late answer did not settle the pushed delivery")
		}},
	}
	for _, n := range newers {
		for _, a := range answers {
			t.Run(n.name+"/"+a.name, func(t *testing.T) {
				ctx := context.Background()
				v := newEnv(t, nil, bossReceivesJobs)
				boss := v.dial(t, "boss-token", []string{"jobs.run"})
				late := v.dial(t, "crew-token", []string{"jobs.run"})
				id := "job-" + n.name + "-" + a.name
				_, err := boss.Publish(ctx, &pigeon.Message{ID: id, Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
				require.NoError(t, err)
				got, err := late.Receive(ctx, "jobs.run", 1)
				require.NoError(t, err)
				require.Len(t, got, 1)
				n.newer(t, v, id, func() {
					requireCodeOf(t, a.answer(ctx, late, got[0]), pigeon.CodeAckNotAllowed)
				})
			})
		}
	}
}
