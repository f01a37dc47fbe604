package ws_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// rawMessages reads the messages of a deliver or deliver_batch frame as
// the bytes the server wrote.
func rawMessages(t *testing.T, frame []byte) (msgs []json.RawMessage) {
	t.Helper()
	var f struct {
		Op         string `json:"op"`
		Message    json.RawMessage
		Deliveries []struct {
			Message json.RawMessage `json:"message"`
		}
	}
	require.NoError(t, json.Unmarshal(frame, &f), "frame %s", frame)
	switch f.Op {
	case ws.OpDeliver:
		msgs = append(msgs, f.Message)
	case ws.OpDeliverBatch:
		for _, d := range f.Deliveries {
			msgs = append(msgs, d.Message)
		}
	}
	return msgs
}

// TestDeliveredFrameCarriesTheJudgedData: over WebSocket, a message
// published alone or in a publish_batch frame, with data of escapes,
// unicode (line and paragraph separators, which an encoder for HTML
// escapes, unescaped), odd spacing, numbers at the edges of the decoder's
// short path and members named as the envelope's own, reaches a subscriber of
// deliver pushes, one of deliver_batch pushes and one that subscribes
// afterwards from the first message retained as the same
// bytes: the stored envelope with its sequence and acceptance time, its
// data byte for byte the data the gates judged (without the spacing
// around it), and the publisher's answer is that encoding too.
func TestDeliveredFrameCarriesTheJudgedData(t *testing.T) {
	datas := transporttest.JudgedData
	st := memory.New(nil)
	var judgedMu sync.Mutex
	judged := map[string]string{} // message id -> the data the gates saw
	v := newEnv(t, nil, withEvents, func(o *pigeon.Options) {
		o.Store = st
		o.Gates = append(o.Gates, pigeon.GateFunc("witness", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
			judgedMu.Lock()
			defer judgedMu.Unlock()
			judged[a.Message.ID] = string(a.Message.Data)
			return pigeon.Allow()
		}))
	})
	pub := v.raw(t, "checkout-token")
	pub.negotiate(eventsSubject)
	one := v.raw(t, "gateway-token")
	one.negotiate(eventsSubject)
	require.NotEmpty(t, one.ok(ws.OpSubscribe, `,"subject":"`+eventsSubject+`","window":1000`, ws.OpSubscribed).Sub)
	many := v.raw(t, "gateway-token")
	many.negotiate(eventsSubject)
	require.NotEmpty(t, many.ok(ws.OpSubscribe, `,"subject":"`+eventsSubject+`","window":1000,"batch":true`, ws.OpSubscribed).Sub)

	// The message's own encoding with its data written as the publisher
	// wrote it, spacing and escapes kept.
	frameOf := func(i int) string {
		m := demo.Payment("o-" + strconv.Itoa(i))
		m.Subject = eventsSubject
		m.Data = json.RawMessage(`{"placeholder":true}`)
		if i%4 == 1 {
			m.Hops = 7 // the broker's depth, never the publisher's
		}
		data := strings.Replace(datas[i%len(datas)], "%d", strconv.Itoa(i), 1)
		return strings.Replace(msgJSON(t, m), `{"placeholder":true}`, data, 1)
	}
	var answers []json.RawMessage // the publisher's answers' messages, in order
	answerOf := func(frame []byte, field string) []json.RawMessage {
		var f map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(frame, &f))
		if field == "message" {
			return []json.RawMessage{f["message"]}
		}
		var rs []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(f["results"], &rs))
		var out []json.RawMessage
		for _, r := range rs {
			require.Equal(t, `"`+pigeon.StatusAccepted+`"`, string(r["status"]), "result %s", frame)
			out = append(out, r["message"])
		}
		return out
	}
	pub.write(`{"op":"publish","id":"p0","message":` + frameOf(0) + `}`)
	answers = append(answers, answerOf(rawAnswer(t, pub, "p0"), "message")...)
	var batch []string
	for i := 1; i < 3*len(datas); i++ {
		batch = append(batch, frameOf(i))
	}
	pub.write(`{"op":"publish_batch","id":"p1","messages":[` + strings.Join(batch, ",") + `]}`)
	answers = append(answers, answerOf(rawAnswer(t, pub, "p1"), "results")...)
	require.Len(t, answers, 3*len(datas))

	receive := func(r *rawClient, n int) map[string]string {
		got := map[string]string{}
		for len(got) < n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, b, err := r.c.Read(ctx)
			cancel()
			require.NoError(t, err)
			msgs := rawMessages(t, b)
			for _, m := range msgs {
				var id struct{ ID string }
				require.NoError(t, json.Unmarshal(m, &id))
				got[id.ID] = string(m)
			}
		}
		return got
	}
	pushed, batched := receive(one, len(answers)), receive(many, len(answers))
	late := v.raw(t, "gateway-token") // subscribed after the fact: it reads what is retained
	late.negotiate(eventsSubject)
	require.NotEmpty(t, late.ok(ws.OpSubscribe, `,"subject":"`+eventsSubject+`","window":1000,"batch":true,"start":"first"`, ws.OpSubscribed).Sub)
	retained := receive(late, len(answers))

	judgedMu.Lock()
	defer judgedMu.Unlock()
	for i, ans := range answers {
		var m pigeon.Message
		require.NoError(t, json.Unmarshal(ans, &m), "answer %d: %s", i, ans)
		require.Equal(t, strings.TrimSpace(judged[m.ID]), string(m.Data), "message %d: the data answered is the data judged", i)
		require.Zero(t, m.Hops, "message %d", i)
		require.Equal(t, string(ans), pushed[m.ID], "message %d: a deliver push is the answer's encoding", i)
		require.Equal(t, string(ans), batched[m.ID], "message %d: a deliver_batch entry is the answer's encoding", i)
		require.Equal(t, string(ans), retained[m.ID], "message %d: a retained message is the answer's encoding", i)

		sm, err := st.Lookup(context.Background(), m.ID)
		require.NoError(t, err)
		require.Equal(t, sm.Seq, m.Sequence)
		stored := strings.Replace(string(ans), `,"sequence":`+strconv.FormatUint(sm.Seq, 10), "", 1)
		stored = strings.Replace(stored, `,"acceptedAt":"`+m.AcceptedAt+`"`, "", 1)
		require.Equal(t, string(sm.Body), stored, "message %d: what is sent is what is stored", i)
	}
}

// rawAnswer reads frames until the answer to id and returns its bytes.
func rawAnswer(t *testing.T, r *rawClient, id string) []byte {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := r.c.Read(ctx)
		cancel()
		require.NoError(t, err)
		var f struct{ Re string }
		require.NoError(t, json.Unmarshal(b, &f))
		if f.Re == id {
			return b
		}
	}
}
