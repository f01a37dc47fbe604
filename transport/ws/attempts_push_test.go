package ws_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/transport/ws"
)

// pushedForms are the ways a delivery's "attempt" reaches the client's
// decoder, as pulledForms are for a receive answer's "attempts": as the
// broker writes it; beside a member the client does not know; and named
// with an escape. Each takes another path through the decoder.
var pushedForms = []struct{ name, before, member string }{
	{"as written", "", `"attempt"`},
	{"beside an unknown member", `"note":"x",`, `"attempt"`},
	{"named with an escape", "", `"att\u0065mpt"`},
}

// pushedShapes are where the delivery under test sits: a deliver frame
// of its own, between two others; or the first, middle or last entry of
// one deliver_batch of three. at is its position among the three.
var pushedShapes = []struct {
	name  string
	batch bool
	at    int
}{
	{"deliver", false, 1},
	{"deliver_batch first", true, 0},
	{"deliver_batch middle", true, 1},
	{"deliver_batch last", true, 2},
}

// A pushed delivery whose attempt is no lease's refuses that delivery
// alone, as the TypeScript, Python and Rust clients do, and as a receive
// answer refuses such an entry (TestPullAnswerRefusesAnAttemptAlone, over
// the same attempts): it is logged naming its op, entry and message, not
// handed to the handler and never acked (the server's ack wait gives it
// back), and the deliveries beside it, in its deliver_batch or in frames
// of their own, are handed over, each with its own attempt, and acked.
// Before, an attempt that was no integer (1.5, 1.0, "2", true, {}), or
// above 2^63-1, failed the whole frame in the decoder: a deliver_batch
// holding one such entry dropped every delivery in it until their ack
// wait, and the refusal was logged as an undecodable frame, naming no
// message.
func TestPushedDeliveryRefusesAnAttemptAlone(t *testing.T) {
	for _, form := range pushedForms {
		for _, shape := range pushedShapes {
			for _, row := range pulledAttempts {
				t.Run(form.name+"/"+shape.name+"/"+row.name, func(t *testing.T) {
					// Three deliveries in order: msg_x, under the row's
					// attempt, at shape.at; msg_a (attempt 2) and msg_b
					// (attempt 3) around it.
					type pushed struct {
						id, attempt string
						seq         uint64
					}
					others := []pushed{{"msg_a", "2", 0}, {"msg_b", "3", 0}}
					var all []pushed
					for i := range 3 {
						p := pushed{id: "msg_x", attempt: row.text}
						if i != shape.at {
							p, others = others[0], others[1:]
						}
						p.seq = uint64(4 + i)
						all = append(all, p)
					}
					entry := func(p pushed) string {
						return form.before + form.member + `:` + p.attempt + `,"message":` + pushedMessageOf(p.id, p.seq)
					}
					var frames []string
					if shape.batch {
						es := make([]string, len(all))
						for i, p := range all {
							es[i] = `{` + entry(p) + `}`
						}
						frames = []string{`{"op":"deliver_batch","sub":"s1","deliveries":[` + strings.Join(es, ",") + `]}`}
					} else {
						for _, p := range all {
							frames = append(frames, `{"op":"deliver","sub":"s1",`+entry(p)+`}`)
						}
					}

					logs := &refusalLog{}
					seen, acked := scriptedPush(t, "chat.messages", append(frames, deliverSeq("s1", "end", 9)), "msg_end", logs)

					var wantSeen, wantAcked []entryOf
					var refused []entryRefusal
					for i, p := range all {
						if p.id == "msg_x" && !row.taken {
							index := int64(-1)
							if shape.batch {
								index = int64(i)
							}
							refused = []entryRefusal{{map[bool]string{false: ws.OpDeliver, true: ws.OpDeliverBatch}[shape.batch], index, "msg_x"}}
							continue
						}
						n, err := strconv.Atoi(p.attempt)
						require.NoError(t, err)
						wantSeen = append(wantSeen, entryOf{p.id, n, p.seq})
						wantAcked = append(wantAcked, entryOf{p.id, 0, p.seq})
					}
					wantSeen = append(wantSeen, entryOf{"msg_end", 1, 9})
					wantAcked = append(wantAcked, entryOf{"msg_end", 0, 9})
					require.Equal(t, wantSeen, seen, "the deliveries kept reach the handler, each with its own attempt")
					require.Equal(t, wantAcked, acked, "the deliveries kept are acked, the refused one never")
					require.Equal(t, refused, logs.withoutSequences(), "the refusal is logged, naming its op, entry and message")
				})
			}
		}
	}
}

// pushedMessageOf is the stored message id at sequence seq.
func pushedMessageOf(id string, seq uint64) string {
	return `{"specversion":"1.0","id":"` + id + `","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":` +
		strconv.FormatUint(seq, 10) + `,"data":{}}`
}
