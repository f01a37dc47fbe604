package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// resultOf is the result of a decisions answer accepting the message id
// at sequence seq, as the broker writes it for a brief publish_batch:
// the message without its data.
func resultOf(id string, seq uint64) string {
	return `{"status":"accepted","message":{"specversion":"1.0","id":"` + id + `","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":` +
		strconv.FormatUint(seq, 10) + `}}`
}

// badResults are results of a decisions answer no broker sends: the
// result accepting msg_x at sequence 5 (resultOf) with old replaced by
// new, or another result in its place. says is the status the refusal
// names, when the result's reads as one the broker answers.
var badResults = []struct {
	name     string
	old, new string
	result   string
	says     string
}{
	{name: "status a number", old: `"status":"accepted"`, new: `"status":7`},
	{name: "status in another case", old: `"status":`, new: `"Status":`, says: pigeon.StatusAccepted},
	{name: "sequence a string", old: `"sequence":5`, new: `"sequence":"5"`, says: pigeon.StatusAccepted},
	{name: "sequence negative", old: `"sequence":5`, new: `"sequence":-5`, says: pigeon.StatusAccepted},
	{name: "sequence a fraction", old: `"sequence":5`, new: `"sequence":5.5`, says: pigeon.StatusAccepted},
	{name: "sequence spelled 5.0", old: `"sequence":5`, new: `"sequence":5.0`, says: pigeon.StatusAccepted},
	{name: "sequence beyond 2^64-1", old: `"sequence":5`, new: `"sequence":18446744073709551616`, says: pigeon.StatusAccepted},
	{name: "id a number", old: `"id":"msg_x"`, new: `"id":7`, says: pigeon.StatusAccepted},
	{name: "time a number", old: `"time":"2026-01-01T00:00:00Z"`, new: `"time":20260101`, says: pigeon.StatusAccepted},
	{name: "hops negative", old: `"sequence":5`, new: `"sequence":5,"hops":-1`, says: pigeon.StatusAccepted},
	{name: "signature a string", old: `"sequence":5`, new: `"sequence":5,"signature":"sig"`, says: pigeon.StatusAccepted},
	{name: "a duplicate's sequence a string", old: `"status":"accepted","message":{"specversion":"1.0","id":"msg_x","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":5`,
		new: `"status":"duplicate","message":{"specversion":"1.0","id":"msg_x","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":"5"`, says: pigeon.StatusDuplicate},
	{name: "message a number", result: `{"status":"accepted","message":7}`, says: pigeon.StatusAccepted},
	{name: "message a list", result: `{"status":"accepted","message":[` + resultOf("msg_x", 5) + `]}`, says: pigeon.StatusAccepted},
	{name: "message a string", result: `{"status":"accepted","message":"msg_x"}`, says: pigeon.StatusAccepted},
	{name: "error a string", result: `{"error":"refused"}`},
	{name: "error's code a number", result: `{"error":{"code":7,"message":"m"}}`},
	{name: "error's details a list", result: `{"error":{"code":"FORBIDDEN","message":"m","details":[]}}`},
	{name: "result a number", result: `7`},
	{name: "result a string", result: `"accepted"`},
	{name: "result a list", result: `[` + resultOf("msg_x", 5) + `]`},
	{name: "result a bool", result: `true`},
}

// One result of a decisions answer that the client cannot read fails the
// publish it answers alone, BAD_REQUEST, saying that the answer for that
// message could not be read and that the message may have been accepted
// (with the status it reads as, when it does); the publishes beside it
// in the batch resolve with their own decisions, as the TypeScript,
// Python and Rust clients resolve them, and the connection stays up.
// Before, such a result failed the whole decisions frame: every publish
// of the batch failed BAD_REQUEST although the broker had accepted and
// stored the others, which the caller could then publish again (caught as
// duplicates only under idempotency keys) or take for lost.
func TestDecisionResultRefusedAlone(t *testing.T) {
	for _, row := range badResults {
		for _, pos := range entryPositions {
			t.Run(row.name+"/"+pos.name, func(t *testing.T) {
				results := make([]string, 3)
				ids := []string{"msg_a", "msg_b"}
				for i := range results {
					if i == pos.at {
						results[i] = strings.Replace(resultOf("msg_x", 5), row.old, row.new, 1)
						if row.result != "" {
							results[i] = row.result
						}
						continue
					}
					results[i], ids = resultOf(ids[0], uint64(10+i)), ids[1:]
				}
				outcomes := publishBatchOf(t, `"results":[`+strings.Join(results, ",")+`]`)

				ids = []string{"msg_a", "msg_b"}
				for i, o := range outcomes {
					if i == pos.at {
						require.Nil(t, o.res, "publish %d", i)
						require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(o.err), "publish %d: %v", i, o.err)
						require.ErrorContains(t, o.err, "answer for this message (index "+strconv.Itoa(i)+" of the 3 results of its publish_batch) could not be read")
						require.ErrorContains(t, o.err, "the message may have been accepted")
						if row.says != "" {
							require.ErrorContains(t, o.err, `the answer says "`+row.says+`"`)
						} else {
							require.NotContains(t, o.err.Error(), "the answer says")
						}
						continue
					}
					require.NoError(t, o.err, "publish %d: the results beside it resolve theirs", i)
					require.Equal(t, pigeon.StatusAccepted, o.res.Status)
					require.Equal(t, ids[0], o.res.Message.ID)
					require.Equal(t, uint64(10+i), o.res.Message.Sequence)
					require.JSONEq(t, `{"n":`+strconv.Itoa(i)+`}`, string(o.res.Message.Data), "the data sent, as a brief answer leaves it out")
					ids = ids[1:]
				}
			})
		}
	}
}

// A decisions answer whose text readers could take differently (a name
// twice in one result) is refused whole, as every frame of that kind is:
// each publish of the batch fails with the decoder's code.
func TestDecisionsAmbiguousRefusedWhole(t *testing.T) {
	twice := strings.Replace(resultOf("msg_x", 5), `"sequence":5`, `"sequence":5,"sequence":6`, 1)
	outcomes := publishBatchOf(t, `"results":[`+resultOf("msg_a", 10)+`,`+twice+`,`+resultOf("msg_b", 12)+`]`)
	for i, o := range outcomes {
		require.Equal(t, pigeon.CodeDuplicateKey, pigeon.ErrorCode(o.err), "publish %d: %v", i, o.err)
	}
}

// published is the outcome of one publish.
type published struct {
	res *pigeon.Result
	err error
}

// publishBatchOf publishes three messages (data {"n":i}) in one
// publish_batch to a scripted server answering it with a decisions frame
// of results (the frame's members after its "re"), and returns each
// publish's outcome, once the connection is known to have stayed up.
func publishBatchOf(t *testing.T, results string) []published {
	t.Helper()
	batches := make(chan int, 4)
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpPublishBatch:
			batches <- len(f.Batch)
			return []string{`{"op":"decisions","re":"` + f.ID + `",` + results + `}`}
		case ws.OpPublish:
			batches <- 1
			return []string{`{"op":"error","re":"` + f.ID + `","error":{"code":"INTERNAL","message":"a lone publish","details":{}}}`}
		case ws.OpReceive:
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(ctx)
	// Held, the writer sends the three together once let go.
	release := ws.HoldWriter(s)
	var pending []*ws.PendingPublish
	for i := range 3 {
		p, err := s.PublishAsync(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)})
		if err != nil {
			release()
		}
		require.NoError(t, err)
		pending = append(pending, p)
	}
	release()
	out := make([]published, len(pending))
	for i, p := range pending {
		out[i].res, out[i].err = p.Wait(ctx)
	}
	require.Equal(t, 3, <-batches, "the three publishes left in one publish_batch")
	require.Empty(t, batches)
	_, err = s.Receive(ctx, "chat.messages", 1) // answered after the decisions
	require.NoError(t, err)
	require.NoError(t, s.Err(), "an unread result does not end the connection")
	return out
}

// A result that decodes but whose status no broker answers a publish with
// (null, empty, another word) fails its own publish, BAD_REQUEST, saying
// the message may have been accepted; the results beside it resolve.
func TestDecisionResultOfAnotherStatusRefusedAlone(t *testing.T) {
	for _, status := range []string{`null`, `""`, `"refused"`, `"Accepted"`, `"quarantined"`} {
		t.Run(status, func(t *testing.T) {
			odd := strings.Replace(resultOf("msg_x", 5), `"status":"accepted"`, `"status":`+status, 1)
			require.NotEqual(t, resultOf("msg_x", 5), odd)
			outcomes := publishBatchOf(t, `"results":[`+resultOf("msg_a", 10)+`,`+odd+`,`+resultOf("msg_b", 12)+`]`)
			require.Nil(t, outcomes[1].res)
			require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(outcomes[1].err), "%v", outcomes[1].err)
			require.ErrorContains(t, outcomes[1].err, "the message may have been accepted")
			for _, i := range []int{0, 2} {
				require.NoError(t, outcomes[i].err, "publish %d", i)
				require.Equal(t, pigeon.StatusAccepted, outcomes[i].res.Status)
			}
		})
	}
}
