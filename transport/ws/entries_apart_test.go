package ws_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// entryMessage is a stored message of jobs.run, id msg_x at sequence 5,
// as the broker writes it; each badEntries row spoils one member of it.
const entryMessage = `{"specversion":"1.0","id":"msg_x","type":"job","source":"p","subject":"jobs.run","time":"2026-01-01T00:00:00Z","sequence":5,"data":{}}`

// badEntries are entries of a list no broker sends: a message with one
// member it cannot hold (old replaced by new in entryMessage), a message
// that is no object (message in its place), or an entry that is no
// delivery, or no message, at all (entry in its place: in a
// deliver_batch the delivery's, in a receive or replay answer the
// message's). id and seq are what the refusal's log names of it: what can
// be read ("", 0: nothing).
var badEntries = []struct {
	name           string
	old, new       string
	message, entry string
	id             string
	seq            uint64
}{
	{name: "sequence a string", old: `"sequence":5`, new: `"sequence":"5"`, id: "msg_x"},
	{name: "sequence negative", old: `"sequence":5`, new: `"sequence":-5`, id: "msg_x"},
	{name: "sequence a fraction", old: `"sequence":5`, new: `"sequence":5.5`, id: "msg_x"},
	{name: "sequence spelled 5.0", old: `"sequence":5`, new: `"sequence":5.0`, id: "msg_x"},
	{name: "sequence beyond 2^64-1", old: `"sequence":5`, new: `"sequence":18446744073709551616`, id: "msg_x"},
	{name: "id a number", old: `"id":"msg_x"`, new: `"id":7`, seq: 5},
	{name: "time a number", old: `"time":"2026-01-01T00:00:00Z"`, new: `"time":20260101`, id: "msg_x", seq: 5},
	{name: "type an object", old: `"type":"job"`, new: `"type":{"name":"job"}`, id: "msg_x", seq: 5},
	{name: "hops negative", old: `"data":{}`, new: `"data":{},"hops":-1`, id: "msg_x", seq: 5},
	{name: "hops beyond 2^32-1", old: `"data":{}`, new: `"data":{},"hops":4294967296`, id: "msg_x", seq: 5},
	{name: "signature a string", old: `"data":{}`, new: `"data":{},"signature":"sig"`, id: "msg_x", seq: 5},
	{name: "signature form a fraction", old: `"data":{}`, new: `"data":{},"signature":{"kid":"k","alg":"ed25519","sig":"x","v":2.5}`, id: "msg_x", seq: 5},
	{name: "message a number", message: `7`},
	{name: "message a list", message: `[` + entryMessage + `]`},
	{name: "message null", message: `null`},
	{name: "entry a number", entry: `7`},
	{name: "entry a string", entry: `"msg_x"`},
	{name: "entry a list", entry: `[{"attempt":1,"message":` + entryMessage + `}]`},
	{name: "entry a bool", entry: `true`},
	{name: "entry null", entry: `null`},
}

// entryOps are the lists read entry by entry: the deliveries of a
// deliver_batch push, and the messages of a receive and of a replay
// answer.
var entryOps = []string{ws.OpDeliverBatch, ws.OpReceive, ws.OpReplay}

// entryPositions are where the bad entry sits among three: first,
// middle, last.
var entryPositions = []struct {
	name string
	at   int
}{{"first", 0}, {"middle", 1}, {"last", 2}}

// One entry of a list no broker sends (a deliver_batch's delivery, a
// receive or replay answer's message) is refused alone, whatever is wrong
// with it, as the TypeScript, Python and Rust clients refuse it: logged
// as not handed over, naming its op, its index and, when they can be
// read, its message's id and sequence; never handed to a handler or the
// caller, never acked (the server's ack wait gives a leased one back);
// and the entries beside it are handed over, each with its own attempt,
// and acked. The connection stays up. Before, an entry the decoder could
// not take (a sequence that is a string, negative or a fraction, an id
// that is a number, an entry that is no object, …) failed the whole
// frame: a deliver_batch dropped every delivery in it until their ack
// wait, a receive or replay failed BAD_REQUEST, and the refusal was
// logged as an undecodable frame, naming no entry.
func TestListEntryRefusedAlone(t *testing.T) {
	for _, op := range entryOps {
		for _, row := range badEntries {
			for _, pos := range entryPositions {
				t.Run(op+"/"+row.name+"/"+pos.name, func(t *testing.T) {
					// msg_x, the bad one, at pos; msg_a and msg_b, as the
					// broker writes them, around it.
					good := []entryOf{{"msg_a", 2, 3}, {"msg_b", 3, 7}}
					var all []entryOf
					texts := make([]string, 3)
					for i := range 3 {
						e := entryOf{"msg_x", 1, 5}
						if i != pos.at {
							e, good = good[0], good[1:]
						}
						all = append(all, e)
						texts[i] = e.text(op, entryMessage)
						if i == pos.at {
							texts[i] = e.text(op, strings.Replace(entryMessage, row.old, row.new, 1))
							if row.message != "" {
								texts[i] = e.text(op, row.message)
							}
							if row.entry != "" {
								texts[i] = row.entry
							}
						}
					}
					logs := &refusalLog{}
					var seen, acked []entryOf
					if op == ws.OpDeliverBatch {
						seen, acked = pushEntries(t, texts, logs)
					} else {
						seen, acked = pullEntries(t, op, texts, all, logs)
					}

					var want, wantAcked []entryOf
					for _, e := range all {
						if e.id == "msg_x" {
							continue
						}
						switch op {
						case ws.OpReplay:
							e.attempt = 0 // a replay leases nothing, and is not acked
							want = append(want, e)
						case ws.OpReceive:
							want, wantAcked = append(want, e), append(wantAcked, e)
						default:
							// A subscription's acks name no attempt.
							want, wantAcked = append(want, e), append(wantAcked, entryOf{e.id, 0, e.seq})
						}
					}
					if op == ws.OpDeliverBatch {
						want, wantAcked = append(want, entryOf{"msg_end", 1, 9}), append(wantAcked, entryOf{"msg_end", 0, 9})
					}
					require.Equal(t, want, seen, "the entries beside it are handed over, each with its own attempt")
					require.Equal(t, wantAcked, acked, "the entries handed over are acked, the refused one never")
					require.Equal(t, []loggedEntry{{op, int64(pos.at), row.id, row.seq}}, logs.got(),
						"the refusal is logged as not handed over, naming its op, index, and what can be read of its message")
				})
			}
		}
	}
}

// text is the entry as op's list holds it, with msg its message (for
// entryMessage, the entry's id and sequence written in): a delivery of a
// deliver_batch, or a message of a receive or replay answer.
func (e entryOf) text(op, msg string) string {
	if msg == entryMessage {
		msg = strings.Replace(msg, `"msg_x"`, strconv.Quote(e.id), 1)
		msg = strings.Replace(msg, `"sequence":5`, `"sequence":`+strconv.FormatUint(e.seq, 10), 1)
	}
	if op != ws.OpDeliverBatch {
		return msg
	}
	return `{"attempt":` + strconv.Itoa(e.attempt) + `,"message":` + msg + `}`
}

// A deliver whose message is no message the broker sends, whatever is
// wrong with it, is refused as an entry of a deliver_batch is
// (TestListEntryRefusedAlone, over the same messages): logged as not
// handed over, naming its op and, when they can be read, its message's
// id and sequence; never handed to a handler nor acked (the server's ack
// wait gives it back); the deliveries beside it are handed over and
// acked, and the connection stays up. Before, a message the decoder could
// not take (a sequence that is a string, an id that is a number, a
// message that is no object, …) was logged only as an undecodable frame
// from the server, naming neither the delivery nor its message.
func TestDeliverMessageRefusedAlone(t *testing.T) {
	for _, row := range badEntries {
		if row.entry != "" {
			continue // a deliver_batch's entry, or a messages answer's
		}
		t.Run(row.name, func(t *testing.T) {
			all := []entryOf{{"msg_a", 2, 3}, {"msg_x", 1, 5}, {"msg_b", 3, 7}}
			frames := make([]string, len(all))
			for i, e := range all {
				msg := entryMessage
				if e.id == "msg_x" {
					msg = strings.Replace(entryMessage, row.old, row.new, 1)
					if row.message != "" {
						msg = row.message
					}
				}
				frames[i] = e.deliver(msg)
			}
			logs := &refusalLog{}
			seen, acked := pushFrames(t, frames, logs)
			require.Equal(t, []entryOf{{"msg_a", 2, 3}, {"msg_b", 3, 7}, {"msg_end", 1, 9}}, seen,
				"the deliveries beside it are handed over")
			require.Equal(t, []entryOf{{"msg_a", 0, 3}, {"msg_b", 0, 7}, {"msg_end", 0, 9}}, acked,
				"the deliveries handed over are acked, the refused one never")
			require.Equal(t, []loggedEntry{{ws.OpDeliver, -1, row.id, row.seq}}, logs.got(),
				"the refusal is logged as not handed over, naming its op and what can be read of its message")
		})
	}
}

// deliver is a deliver push of e (on s1) with msg its message (for
// entryMessage, the entry's id and sequence written in).
func (e entryOf) deliver(msg string) string {
	d := e.text(ws.OpDeliverBatch, msg)
	return `{"op":"deliver","sub":"s1",` + strings.TrimSuffix(strings.TrimPrefix(d, "{"), "}") + `}`
}

// pushEntries subscribes to jobs.run on a scripted server that pushes
// the deliveries entries in one deliver_batch, then msg_end (attempt 1,
// sequence 9) in a deliver of its own; it returns the deliveries handed
// to the handler and the acks the server read, once msg_end is handled
// and the subscription ended.
func pushEntries(t *testing.T, entries []string, logs *refusalLog) (seen, acked []entryOf) {
	t.Helper()
	return pushFrames(t, []string{`{"op":"deliver_batch","sub":"s1","deliveries":[` + strings.Join(entries, ",") + `]}`}, logs)
}

// pushFrames subscribes to jobs.run on a scripted server that pushes
// frames (on s1), then msg_end (attempt 1, sequence 9) in a deliver of
// its own; it returns the deliveries handed to the handler and the acks
// the server read, once msg_end is handled and the subscription ended
// (scriptedPush).
func pushFrames(t *testing.T, frames []string, logs *refusalLog) (seen, acked []entryOf) {
	t.Helper()
	return scriptedPush(t, "jobs.run", append(frames, entryOf{"msg_end", 1, 9}.deliver(entryMessage)), "msg_end", logs)
}

// pullEntries receives (op receive: ReceiveAttempts, then Receive, the
// answer naming each entry's attempt from all) or replays (op replay)
// from a scripted server answering with entries; it returns the messages
// handed over, each with its attempt, and the acks the server read: a
// receive's messages are acked with their attempts, a replay's are not.
func pullEntries(t *testing.T, op string, entries []string, all []entryOf, logs *refusalLog) (seen, acked []entryOf) {
	t.Helper()
	answer := `"messages":[` + strings.Join(entries, ",") + `]`
	if op == ws.OpReceive {
		attempts := make([]string, len(all))
		for i, e := range all {
			attempts[i] = strconv.Itoa(e.attempt)
		}
		answer += `,"attempts":[` + strings.Join(attempts, ",") + `]`
	}
	s, acks := pullSession(t, answer, logs)
	ctx := context.Background()
	if op == ws.OpReplay {
		msgs, err := s.Replay(ctx, pigeon.ReplayRequest{Subject: "jobs.run", Reason: "audit"})
		require.NoError(t, err, "a refused entry does not fail the answer")
		for _, m := range msgs {
			seen = append(seen, entryOf{m.ID, 0, m.Sequence})
		}
		require.NoError(t, s.Err(), "a refused entry does not end the connection")
		return seen, nil
	}
	msgs, attempts, err := s.ReceiveAttempts(ctx, "jobs.run", 3)
	require.NoError(t, err, "a refused entry does not fail the answer")
	for i, m := range msgs {
		seen = append(seen, entryOf{m.ID, attempts[i], m.Sequence})
	}
	logged := logs.got()
	plain, err := s.Receive(ctx, "jobs.run", 3)
	require.NoError(t, err)
	require.Equal(t, messageIDs(msgs), messageIDs(plain), "Receive leaves out what ReceiveAttempts does")
	require.Equal(t, append(logged, logged...), logs.got(), "and logs it alike")
	logs.keep(len(logged))
	for i, m := range msgs {
		require.NoError(t, s.AckAttempt(ctx, "jobs.run", m.ID, m.Sequence, attempts[i]))
	}
	for _, f := range acks() {
		acked = append(acked, entryOf{f.MessageID, f.Attempt, f.Sequence})
	}
	require.NoError(t, s.Err(), "a refused entry does not end the connection")
	return seen, acked
}
