package ws_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/transport/ws"
)

// pushedMessage is a message msg_bad whose members after "time" are rest.
func pushedMessage(rest string) string {
	return `{"specversion":"1.0","id":"msg_bad","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z"` + rest + `,"data":{}}`
}

// A pushed delivery (deliver, deliver_batch) whose message has no
// sequence (absent, null, 0), or whose attempt is not an integer of 1 to
// 2^31-1 (absent, null, 0, negative, beyond), is no broker's: every
// delivery comes from the log, and one acked by its id alone settles
// whichever message holds the id. It is refused as the TypeScript, Python
// and Rust clients refuse it: logged naming the message, not handed to the
// handler, not acked (the server's ack wait gives it back). The
// well-formed delivery after it goes on.
func TestClientRefusesAPushedDeliveryWithoutSequenceOrAttempt(t *testing.T) {
	const seq = `,"sequence":4`
	cases := []struct {
		name    string
		attempt string // the attempt member with its leading comma, or ""
		rest    string // the message's members after "time"
	}{
		{"sequence absent", `,"attempt":1`, ""},
		{"sequence null", `,"attempt":1`, `,"sequence":null`},
		{"sequence 0", `,"attempt":1`, `,"sequence":0`},
		{"attempt absent", "", seq},
		{"attempt null", `,"attempt":null`, seq},
		{"attempt 0", `,"attempt":0`, seq},
		{"attempt negative", `,"attempt":-1`, seq},
		{"attempt 2^31", `,"attempt":2147483648`, seq},
		{"attempt 2^40", `,"attempt":1099511627776`, seq},
		{"attempt 2^63-1", `,"attempt":9223372036854775807`, seq},
	}
	for _, tc := range cases {
		for _, batch := range []bool{false, true} {
			name := tc.name + map[bool]string{false: " deliver", true: " deliver_batch"}[batch]
			t.Run(name, func(t *testing.T) {
				var bad string
				if batch {
					bad = `{"op":"deliver_batch","sub":"s1","deliveries":[{"message":` + pushedMessage(tc.rest) + tc.attempt + `}]}`
				} else {
					bad = `{"op":"deliver","sub":"s1"` + tc.attempt + `,"message":` + pushedMessage(tc.rest) + `}`
				}
				logs := &refusalLog{}
				seen, acked := scriptedPush(t, "chat.messages", []string{bad, deliverSeq("s1", "good", 9)}, "msg_good", logs)
				require.Equal(t, []string{"msg_good"}, idsOf(seen), "the refused delivery reaches no handler")
				require.Equal(t, []string{"msg_good"}, idsOf(acked), "the refused delivery is not acked")
				require.Equal(t, []string{"msg_bad"}, logs.ids(), "the refusal is reported, naming the message")
			})
		}
	}
}

// A message of a receive answer whose attempt is beyond 2^31-1 is
// refused, as one of 0 or below is: an ack naming it is one the server
// refuses, and the other clients take attempts of 1 to 2^31-1 only. It is
// left out alone (see TestPullAnswerRefusesABadEntryAlone): the answer
// holding only it hands over nothing, without an error.
func TestClientRefusesAPulledAttemptBeyondTheLimit(t *testing.T) {
	msg := `{"specversion":"1.0","id":"msg_1","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":3,"data":{}}`
	for _, tc := range []struct {
		attempt string
		ok      bool
	}{
		{"1", true},
		{"2147483647", true},
		{"0", false},
		{"-1", false},
		{"null", false},
		{"2147483648", false},
		{strconv.FormatInt(1<<40, 10), false},
		{"9223372036854775807", false},
	} {
		t.Run(tc.attempt, func(t *testing.T) {
			srv := newScriptedServer(t, func(f *ws.Frame) []string {
				if f.Op == ws.OpReceive {
					return []string{`{"op":"messages","re":"` + f.ID + `","messages":[` + msg + `],"attempts":[` + tc.attempt + `]}`}
				}
				return []string{okFrame(f)}
			})
			ctx := context.Background()
			s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
			require.NoError(t, err)
			defer s.Close(ctx)
			msgs, attempts, err := s.ReceiveAttempts(ctx, "chat.messages", 1)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, msgs, 1)
				require.Equal(t, tc.attempt, strconv.Itoa(attempts[0]))
				return
			}
			require.NoError(t, err)
			require.Empty(t, msgs)
			require.Empty(t, attempts)
		})
	}
}
