package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/transporttest"
)

// attemptSession is a session that binds pull answers to their lease.
type attemptSession interface {
	pigeon.Session
	pigeon.AttemptSettler
}

// TestLatePullAnswerOfTheSamePrincipalNamesItsAttempt: two sessions of
// one principal (a worker pool sharing its identity) pull from jobs.run,
// in process and over a real WebSocket. A pulls the job (attempt 1) and
// stalls past the ack wait; B pulls it again (attempt 2). A's late ack or
// nack naming attempt 1 is ACK_NOT_ALLOWED and leaves B's lease alone:
// nobody else gets the job, B's nack hands it out once more (attempt 3)
// and B's ack then settles it. An answer naming no attempt keeps the
// principal-wide meaning of protocol v1: it settles B's lease.
func TestLatePullAnswerOfTheSamePrincipalNamesItsAttempt(t *testing.T) {
	dialers := []struct {
		name string
		dial func(t *testing.T, clk *testclock.Clock) (attemptSession, attemptSession, pigeon.Session)
	}{
		{"InProcess", func(t *testing.T, clk *testclock.Clock) (attemptSession, attemptSession, pigeon.Session) {
			o := transporttest.Options()
			o.Now = clk.Now
			e, err := pigeon.New(context.Background(), o)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
			conn := func(token string) pigeon.Session {
				s, err := e.Connect(context.Background(), token, []string{"jobs.run"})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close(context.Background()) })
				return s
			}
			return conn("crew-token").(attemptSession), conn("crew-token").(attemptSession), conn("boss-token")
		}},
		{"WebSocket", func(t *testing.T, clk *testclock.Clock) (attemptSession, attemptSession, pigeon.Session) {
			v := newEnv(t, nil, func(o *pigeon.Options) { o.Now = clk.Now })
			return v.dial(t, "crew-token", []string{"jobs.run"}), v.dial(t, "crew-token", []string{"jobs.run"}), v.dial(t, "boss-token", []string{"jobs.run"})
		}},
	}
	answers := []struct {
		name string
		late func(ctx context.Context, s attemptSession, m *pigeon.Message, attempt int) error
	}{
		{"Ack", func(ctx context.Context, s attemptSession, m *pigeon.Message, attempt int) error {
			return s.AckAttempt(ctx, "jobs.run", m.ID, m.Sequence, attempt)
		}},
		{"Nack", func(ctx context.Context, s attemptSession, m *pigeon.Message, attempt int) error {
			return s.NackAttempt(ctx, "jobs.run", m.ID, m.Sequence, attempt, 0)
		}},
		{"AckWithoutSequence", func(ctx context.Context, s attemptSession, m *pigeon.Message, attempt int) error {
			return s.AckAttempt(ctx, "jobs.run", m.ID, 0, attempt)
		}},
	}
	for _, d := range dialers {
		for _, a := range answers {
			t.Run(d.name+"/"+a.name, func(t *testing.T) {
				ctx := context.Background()
				clk := testclock.New(time.Now())
				sa, sb, boss := d.dial(t, clk)
				_, err := boss.Publish(ctx, &pigeon.Message{ID: "job-9", Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
				require.NoError(t, err)
				pull := func(s attemptSession) ([]*pigeon.Message, []int) {
					t.Helper()
					msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 1)
					require.NoError(t, err)
					require.Len(t, attempts, len(msgs))
					return msgs, attempts
				}
				got, attempts := pull(sa)
				require.Len(t, got, 1)
				require.Equal(t, []int{1}, attempts)
				late := got[0]

				clk.Advance(time.Second) // A's lease (300 ms) lapses
				got, attempts = pull(sb)
				require.Len(t, got, 1)
				require.Equal(t, late.ID, got[0].ID)
				require.Equal(t, []int{2}, attempts)

				requireCodeOf(t, a.late(ctx, sa, late, 1), pigeon.CodeAckNotAllowed)
				got, _ = pull(sa)
				require.Empty(t, got, "B's lease still holds the job")
				requireCodeOf(t, a.late(ctx, sb, late, 1), pigeon.CodeAckNotAllowed)

				require.NoError(t, sb.NackAttempt(ctx, "jobs.run", late.ID, late.Sequence, 2, 0), "B's lease was left alone")
				got, attempts = pull(sa)
				require.Len(t, got, 1)
				require.Equal(t, []int{3}, attempts)
				require.NoError(t, sa.AckAttempt(ctx, "jobs.run", late.ID, late.Sequence, 3))
				clk.Advance(time.Second)
				got, _ = pull(sb)
				require.Empty(t, got, "the ack settled the job")
			})
		}
	}
}

// TestPullAnswerWithoutAttemptIsPrincipalWide: an answer naming no
// attempt (protocol v1, and the clients that send none) settles whichever
// lease the principal holds, as documented: A's late ack settles the job
// B holds, and B's nack is then a no-op.
func TestPullAnswerWithoutAttemptIsPrincipalWide(t *testing.T) {
	ctx := context.Background()
	clk := testclock.New(time.Now())
	v := newEnv(t, nil, func(o *pigeon.Options) { o.Now = clk.Now })
	sa, sb := v.dial(t, "crew-token", []string{"jobs.run"}), v.dial(t, "crew-token", []string{"jobs.run"})
	boss := v.dial(t, "boss-token", []string{"jobs.run"})
	_, err := boss.Publish(ctx, &pigeon.Message{ID: "job-v1", Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)
	got, err := sa.Receive(ctx, "jobs.run", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	clk.Advance(time.Second)
	again, err := sb.Receive(ctx, "jobs.run", 1)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.NoError(t, sa.AckSequence(ctx, "jobs.run", got[0].ID, got[0].Sequence))
	require.NoError(t, sb.Nack(ctx, "jobs.run", got[0].ID, 0), "a nack of a settled job is a no-op")
	clk.Advance(time.Second)
	got, err = sb.Receive(ctx, "jobs.run", 1)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestPullAttemptIsCheckedAndAnswered: a negative attempt is
// INVALID_ARGUMENT; a pubsub receive answers no attempts (0 each), and
// an ack naming one there is taken as the receipt it is.
func TestPullAttemptIsCheckedAndAnswered(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil)
	crew := v.dial(t, "crew-token", []string{"jobs.run"})
	requireCodeOf(t, crew.AckAttempt(ctx, "jobs.run", "nope", 0, -1), pigeon.CodeInvalidArgument)
	requireCodeOf(t, crew.NackAttempt(ctx, "jobs.run", "nope", 0, -1, 0), pigeon.CodeInvalidArgument)

	alice := v.dial(t, "alice-token", []string{"chat.messages"})
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	_, err := alice.Publish(ctx, &pigeon.Message{ID: "chat-9", Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"text":"hi"}`)})
	require.NoError(t, err)
	msgs, attempts, err := bob.ReceiveAttempts(ctx, "chat.messages", 5)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, []int{0}, attempts)
	require.NoError(t, bob.AckAttempt(ctx, "chat.messages", msgs[0].ID, msgs[0].Sequence, 4))
}
