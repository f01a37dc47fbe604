package ws_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// pulledAttempts are the attempts a receive answer may name for a leased
// message, and those it may not: an integer of 1 to 2^31-1 is a lease's,
// anything else is none. The rows of the TypeScript client's table
// (delivery_fields.test.mjs, RECEIVED), which the Python and Rust clients
// answer alike, and more: a number spelled with a fraction or an exponent
// is no integer, even when its value is one (1.0, 1e0), as the Python and
// Rust clients read it.
var pulledAttempts = []struct {
	name, text string
	taken      bool
}{
	{"1", "1", true},
	{"2^31-1", "2147483647", true},
	{"0", "0", false},
	{"negative", "-1", false},
	{"negative zero", "-0", false},
	{"fraction", "1.5", false},
	{"2^31", "2147483648", false},
	{"beyond 2^53", "9007199254740993", false},
	{"2^63-1", "9223372036854775807", false},
	{"beyond 2^63-1", "9223372036854775808", false},
	{"beyond 2^64", "18446744073709551616", false},
	{"beyond float64", "1e400", false},
	{"integral fraction", "1.0", false},
	{"exponent", "1e0", false},
	{"a string", `"2"`, false},
	{"null", "null", false},
	{"a bool", "true", false},
	{"an object", "{}", false},
	{"a list", "[1]", false},
}

// pulledForms are the ways a receive answer's "attempts" reaches the
// client's decoder: as the broker writes it; beside a member the client
// does not know (ignored, as every unknown member is); and named with an
// escape. Each takes another path through the decoder, and each must
// answer the same.
var pulledForms = []struct{ name, before, member string }{
	{"as written", "", `"attempts"`},
	{"beside an unknown member", `"note":"x",`, `"attempts"`},
	{"named with an escape", "", `"att\u0065mpts"`},
}

// A receive answer whose attempt for one message is no lease's refuses
// that message alone, as the TypeScript, Python and Rust clients do: it
// is logged naming its entry and message, not handed over and never acked
// (the server's ack wait gives it back), and the messages beside it are
// returned, each with its own attempt, without an error. Receive leaves it
// out as ReceiveAttempts does. Before, an attempt that was no integer
// (1.5, "2", true, {}), or above 2^63-1, failed the whole answer
// (BAD_REQUEST): the messages leased with it were invisible to the caller
// until their ack wait passed.
func TestPullAnswerRefusesAnAttemptAlone(t *testing.T) {
	three := `"messages":[` + pulledMessage("msg_a", `,"sequence":4`) + `,` + pulledMessage("msg_x", `,"sequence":5`) + `,` +
		pulledMessage("msg_b", `,"sequence":6`) + `]`
	for _, form := range pulledForms {
		for _, row := range pulledAttempts {
			t.Run(form.name+"/"+row.name, func(t *testing.T) {
				ctx := context.Background()
				logs := &refusalLog{}
				s, acks := pullSession(t, form.before+three+`,`+form.member+`:[2,`+row.text+`,3]`, logs)

				ids, attempts, refused := []string{"msg_a", "msg_b"}, []int{2, 3}, []entryRefusal{{ws.OpReceive, 1, "msg_x"}}
				if row.taken {
					ids, attempts, refused = []string{"msg_a", "msg_x", "msg_b"}, []int{2, 0, 3}, nil
					n, err := strconv.Atoi(row.text)
					require.NoError(t, err)
					attempts[1] = n
				}
				msgs, got, err := s.ReceiveAttempts(ctx, "jobs.run", 3)
				require.NoError(t, err, "a refused entry does not fail the answer")
				require.Equal(t, ids, messageIDs(msgs))
				require.Equal(t, attempts, got, "each message kept keeps its own attempt")
				require.Equal(t, refused, logs.withoutSequences(), "the refusal is logged, naming its entry and message")

				plain, err := s.Receive(ctx, "jobs.run", 3)
				require.NoError(t, err)
				require.Equal(t, ids, messageIDs(plain), "Receive leaves out what ReceiveAttempts does")
				require.Equal(t, append(refused, refused...), logs.withoutSequences())

				var want []ws.Frame
				for i, m := range msgs {
					require.NoError(t, s.AckAttempt(ctx, "jobs.run", m.ID, m.Sequence, got[i]))
					want = append(want, ws.Frame{MessageID: m.ID, Sequence: m.Sequence, Attempt: got[i]})
				}
				require.Equal(t, want, acks(), "the messages kept are acked with their attempts, the refused one never")
				require.NoError(t, s.Err(), "a refused entry does not end the connection")
			})
		}
	}
}

// A receive answer whose "attempts" is null is malformed as a whole, as
// one whose "attempts" is no list is: the TypeScript and Rust clients
// refuse it BAD_FRAME, the Go client BAD_REQUEST (as its decoder refuses a
// frame field of the wrong type). Nothing is handed over, nothing acked,
// and the connection stays up. An answer without "attempts" leased
// nothing. Before, the Go client took a null "attempts" as absent and
// handed the messages over as not leased (attempt 0): their acks named no
// lease, and settled whichever lease the principal held.
func TestPullAnswerAttemptsNotAListIsRefusedWhole(t *testing.T) {
	two := `"messages":[` + pulledMessage("msg_a", `,"sequence":1`) + `,` + pulledMessage("msg_b", `,"sequence":2`) + `]`
	for _, form := range pulledForms {
		for _, tc := range []struct{ name, answer string }{
			{"null", two + `,` + form.member + `:null`},
			{"null, no messages", `"messages":[],` + form.member + `:null`},
			{"an object", two + `,` + form.member + `:{"0":1,"1":1}`},
			{"a number", two + `,` + form.member + `:1`},
			{"a string", two + `,` + form.member + `:"1,1"`},
			{"a bool", two + `,` + form.member + `:true`},
		} {
			t.Run(form.name+"/"+tc.name, func(t *testing.T) {
				ctx := context.Background()
				s, acks := pullSession(t, form.before+tc.answer, nil)
				msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 2)
				requireCodeOf(t, err, pigeon.CodeBadRequest)
				require.ErrorContains(t, err, "attempts")
				require.Nil(t, msgs)
				require.Nil(t, attempts)
				msgs, err = s.Receive(ctx, "jobs.run", 2)
				requireCodeOf(t, err, pigeon.CodeBadRequest)
				require.Nil(t, msgs)
				require.Empty(t, acks())
				require.NoError(t, s.Err(), "a malformed answer does not end the connection")
			})
		}
	}
	t.Run("absent", func(t *testing.T) {
		ctx := context.Background()
		s, _ := pullSession(t, two, nil)
		msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 2)
		require.NoError(t, err)
		require.Equal(t, []string{"msg_a", "msg_b"}, messageIDs(msgs))
		require.Equal(t, []int{0, 0}, attempts, "an answer without attempts leased nothing")
	})
}

// The broker reads no "attempts" from a client: a client frame carrying
// one is decoded as before, the member checked for its type and
// otherwise ignored. A list of integers, or null, changes nothing; any
// other value is a field of the wrong type (BAD_REQUEST), and the
// connection stays up. A real server, and a real pull: its answer still
// names the lease's attempt.
func TestServerIgnoresClientAttempts(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil)
	boss := v.dial(t, "boss-token", []string{"jobs.run"})
	_, err := boss.Publish(ctx, &pigeon.Message{ID: "job-a", Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":1}`)})
	require.NoError(t, err)

	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	crew.ok(ws.OpPing, `,"attempts":[1,2]`, ws.OpPong)
	crew.ok(ws.OpPing, `,"attempts":null`, ws.OpPong)
	for _, bad := range []string{`[1.5]`, `["1"]`, `[9223372036854775808]`, `{}`, `1`} {
		crew.fail(ws.OpPing, `,"attempts":`+bad, pigeon.CodeBadRequest)
	}
	f := crew.ok(ws.OpReceive, `,"subject":"jobs.run","max":1,"attempts":[7]`, ws.OpMessages)
	require.Len(t, f.Messages, 1)
	require.Equal(t, "job-a", f.Messages[0].ID)
	require.Equal(t, []int{1}, f.Attempts, "the lease's attempt, not the client's")
	crew.ok(ws.OpAck, `,"subject":"jobs.run","messageId":"job-a","sequence":`+strconv.FormatUint(f.Messages[0].Sequence, 10)+`,"attempt":1,"attempts":null`, ws.OpOK)
	crew.ok(ws.OpPing, "", ws.OpPong)
}

// messageIDs are the ids of msgs, in order.
func messageIDs(msgs []*pigeon.Message) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}
