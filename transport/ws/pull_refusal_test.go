package ws_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// pulledMessage is a stored message id with the members rest (its
// sequence, or none).
func pulledMessage(id, rest string) string {
	return `{"specversion":"1.0","id":"` + id + `","type":"job","source":"p","subject":"jobs.run","time":"2026-01-01T00:00:00Z"` + rest + `,"data":{}}`
}

// pullSession dials a scripted server answering every receive and
// replay with answer (the members after "re"), and recording the acks it
// is sent; the session logs to logs, when not nil. It is closed when the
// test ends.
func pullSession(t *testing.T, answer string, logs slog.Handler) (s *ws.Session, acks func() []ws.Frame) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []ws.Frame
	)
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpReceive, ws.OpReplay:
			return []string{`{"op":"messages","re":"` + f.ID + `",` + answer + `}`}
		case ws.OpAck:
			mu.Lock()
			got = append(got, ws.Frame{MessageID: f.MessageID, Sequence: f.Sequence, Attempt: f.Attempt})
			mu.Unlock()
		}
		return []string{okFrame(f)}
	})
	var opts []ws.Option
	if logs != nil {
		opts = append(opts, ws.WithLogger(slog.New(logs)))
	}
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"jobs.run"}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(ctx) })
	return s, func() []ws.Frame {
		mu.Lock()
		defer mu.Unlock()
		return append([]ws.Frame(nil), got...)
	}
}

// A receive answer holding, beside well-formed messages, an entry no
// broker sends (a message whose attempt is not an integer of 1 to
// 2^31-1, one without a sequence, an entry that is not a message) refuses
// that entry alone, as the TypeScript and Python clients do: it is logged
// naming its index and message, not handed over and never acked (the
// server's ack wait gives it back), and the well-formed ones are returned,
// each with its own attempt, without an error, so that they can be acked.
// Before, the whole answer failed INTERNAL: the well-formed messages the
// server had leased were invisible to the caller until their ack wait
// passed, and a server sending the bad entry again starved the consumer.
func TestPullAnswerRefusesABadEntryAlone(t *testing.T) {
	good1 := pulledMessage("msg_good1", `,"sequence":1`)
	good2 := pulledMessage("msg_good2", `,"sequence":3`)
	for _, bad := range []struct{ name, attempt string }{
		{"attempt 0", "0"},
		{"attempt negative", "-1"},
		{"attempt null", "null"},
		{"attempt 2^31", "2147483648"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			ctx := context.Background()
			logs := &refusalLog{}
			s, acks := pullSession(t, `"messages":[`+good1+`,`+pulledMessage("msg_attempt", `,"sequence":2`)+`,`+good2+`,`+
				pulledMessage("msg_unsequenced", "")+`],"attempts":[1,`+bad.attempt+`,2,1]`, logs)

			msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 4)
			require.NoError(t, err, "the refusals do not fail the answer")
			require.Len(t, msgs, 2)
			require.Equal(t, []string{"msg_good1", "msg_good2"}, []string{msgs[0].ID, msgs[1].ID})
			require.Equal(t, []int{1, 2}, attempts, "each message kept keeps its own attempt")
			require.Equal(t, []entryRefusal{{ws.OpReceive, 1, "msg_attempt"}, {ws.OpReceive, 3, "msg_unsequenced"}}, logs.withoutSequences(),
				"each refusal is reported, naming its entry and message")

			for i, m := range msgs {
				require.NoError(t, s.AckAttempt(ctx, "jobs.run", m.ID, m.Sequence, attempts[i]))
			}
			require.Equal(t, []ws.Frame{{MessageID: "msg_good1", Sequence: 1, Attempt: 1}, {MessageID: "msg_good2", Sequence: 3, Attempt: 2}}, acks(),
				"the messages kept are acked, the refused ones never")
			require.NoError(t, s.Err(), "a refused entry does not end the connection")
		})
	}
}

// Receive and Replay leave out an entry that is not a message, or a
// message without a sequence (absent, null, 0), the same way, and return
// the others.
func TestPullAndReplayAnswersRefuseAMessageWithoutSequenceAlone(t *testing.T) {
	answer := `"messages":[` + pulledMessage("msg_good1", `,"sequence":1`) + `,null,` + pulledMessage("msg_good2", `,"sequence":3`) + `,` +
		pulledMessage("msg_absent", "") + `,` + pulledMessage("msg_null", `,"sequence":null`) + `,` + pulledMessage("msg_zero", `,"sequence":0`) + `]`
	refused := func(op string) []entryRefusal {
		return []entryRefusal{{op, 1, ""}, {op, 3, "msg_absent"}, {op, 4, "msg_null"}, {op, 5, "msg_zero"}}
	}
	for _, tc := range []struct {
		op   string
		pull func(ctx context.Context, s *ws.Session) ([]*pigeon.Message, []int, error)
	}{
		{ws.OpReceive, func(ctx context.Context, s *ws.Session) ([]*pigeon.Message, []int, error) {
			msgs, err := s.Receive(ctx, "jobs.run", 10)
			return msgs, []int{0, 0}, err
		}},
		{"receive attempts", func(ctx context.Context, s *ws.Session) ([]*pigeon.Message, []int, error) {
			return s.ReceiveAttempts(ctx, "jobs.run", 10)
		}},
		{ws.OpReplay, func(ctx context.Context, s *ws.Session) ([]*pigeon.Message, []int, error) {
			msgs, err := s.Replay(ctx, pigeon.ReplayRequest{Subject: "jobs.run", Reason: "audit"})
			return msgs, []int{0, 0}, err
		}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			ctx := context.Background()
			logs := &refusalLog{}
			s, _ := pullSession(t, answer, logs)
			msgs, attempts, err := tc.pull(ctx, s)
			require.NoError(t, err)
			require.Len(t, msgs, 2)
			require.Equal(t, []int{0, 0}, attempts, "an answer naming no attempts leases nothing")
			require.Equal(t, []string{"msg_good1", "msg_good2"}, []string{msgs[0].ID, msgs[1].ID})
			op := tc.op
			if op != ws.OpReplay {
				op = ws.OpReceive
			}
			require.Equal(t, refused(op), logs.withoutSequences())
		})
	}
}

// An answer that is malformed as a whole is still refused whole: its
// attempts cannot be told to its messages, or it holds no list of them.
// Nothing is handed over and nothing is acked.
func TestPullAnswerMalformedAsAWholeIsRefused(t *testing.T) {
	two := `"messages":[` + pulledMessage("msg_a", `,"sequence":1`) + `,` + pulledMessage("msg_b", `,"sequence":2`) + `]`
	for _, tc := range []struct{ name, answer string }{
		{"fewer attempts", two + `,"attempts":[1]`},
		{"more attempts", two + `,"attempts":[1,1,1]`},
		{"no attempts for messages", two + `,"attempts":[]`},
		{"attempts not a list", two + `,"attempts":1`},
		{"messages not a list", `"messages":{"id":"msg_a"},"attempts":[1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, acks := pullSession(t, tc.answer, nil)
			msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 2)
			require.Error(t, err)
			require.Nil(t, msgs)
			require.Nil(t, attempts)
			require.Empty(t, acks())
		})
	}
}
