package ws_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/transport/ws"
)

// trimJobs trims jobs.run through seq in v's store, as retention does:
// the ids of the messages trimmed are free again.
func trimJobs(t *testing.T, v *env, seq uint64) {
	t.Helper()
	n, err := v.st.(store.SeqTrimmer).TrimThrough(context.Background(), "jobs.run", seq)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func jobJSON(id string, n int) string {
	return `{"id":"` + id + `","type":"job","subject":"jobs.run","intent":"run","data":{"n":` + strconv.Itoa(n) + `}}`
}

// pushedJob has boss publish job-1 on jobs.run and a raw crew client,
// subscribed in group g, receive it. It returns boss, crew, the
// subscription and the deliver frame.
func pushedJob(t *testing.T, v *env) (boss, crew *rawClient, sub string, d *ws.Frame) {
	t.Helper()
	boss = v.raw(t, "boss-token")
	boss.negotiate("jobs.run")
	crew = v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	sub = crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g"`, ws.OpSubscribed).Sub
	boss.ok(ws.OpPublish, `,"message":`+jobJSON("job-1", 1), ws.OpDecision)
	d = crew.push()
	require.Equal(t, ws.OpDeliver, d.Op)
	return boss, crew, sub, d
}

// reusedDelivery leaves a raw crew subscription on jobs.run holding, in
// flight, the delivery of job-x at sequence 3, after it had been handed
// job-x at sequence 1, trimmed since, and other at sequence 2: its answer
// to the first job-x comes late. It returns crew and the subscription.
func reusedDelivery(t *testing.T) (*rawClient, string) {
	t.Helper()
	v := newEnv(t, nil, longAckWait)
	boss := v.raw(t, "boss-token")
	boss.negotiate("jobs.run")
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","maxInFlight":3`, ws.OpSubscribed).Sub
	deliver := func(id string, seq uint64) {
		t.Helper()
		m := decodeMsg(t, boss.ok(ws.OpPublish, `,"message":`+jobJSON(id, int(seq)), ws.OpDecision).Message)
		require.Equal(t, seq, m.Sequence)
		d := crew.push()
		require.Equal(t, ws.OpDeliver, d.Op)
		require.Equal(t, id, decodeMsg(t, d.Message).ID)
		require.Equal(t, seq, d.Message.Sequence, "a deliver frame carries its message's sequence")
	}
	deliver("job-x", 1)
	deliver("other", 2)
	trimJobs(t, v, 1) // job-x is free again
	deliver("job-x", 3)
	return crew, sub
}

// TestLateAckDoesNotSettleAReusedIDsDelivery: a subscription's delivery
// of a message published under the id of one trimmed while the client
// still held it is settled only by an answer that can be its own: one
// naming its sequence. An answer naming the old delivery's sequence, or,
// from a client that names none (protocol v1), any answer to the id,
// since it cannot be told from a late answer to the old delivery, is
// refused (ACK_NOT_ALLOWED, or listed in notPending) and leaves it in
// flight. Frames whose sequences do not go with their ids are refused.
func TestLateAckDoesNotSettleAReusedIDsDelivery(t *testing.T) {
	cases := []struct {
		name string
		late func(crew *rawClient, sub string)
	}{
		{"AckWithoutSequence", func(crew *rawClient, sub string) {
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x"`, pigeon.CodeAckNotAllowed)
		}},
		{"AckOfTheOldSequence", func(crew *rawClient, sub string) {
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":1`, pigeon.CodeAckNotAllowed)
		}},
		{"NackOfTheOldSequence", func(crew *rawClient, sub string) {
			crew.fail(ws.OpNack, `,"sub":"`+sub+`","messageId":"job-x","sequence":1,"delayMs":0`, pigeon.CodeAckNotAllowed)
		}},
		{"NackWithoutSequence", func(crew *rawClient, sub string) {
			crew.fail(ws.OpNack, `,"sub":"`+sub+`","messageId":"job-x","delayMs":0`, pigeon.CodeAckNotAllowed)
		}},
		{"BatchWithTheOldSequence", func(crew *rawClient, sub string) {
			a := crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":["job-x","other"],"sequences":[1,2]`, ws.OpOK)
			require.Equal(t, []string{"job-x"}, a.NotPending)
		}},
		{"BatchWithoutSequences", func(crew *rawClient, sub string) {
			a := crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":["job-x","other"]`, ws.OpOK)
			require.Equal(t, []string{"job-x"}, a.NotPending)
		}},
		{"BadFrames", func(crew *rawClient, sub string) {
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageIds":["job-x","other"],"sequences":[3]`, pigeon.CodeBadRequest)
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageIds":["job-x"],"sequence":3`, pigeon.CodeBadRequest)
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":-3`, pigeon.CodeBadRequest)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			crew, sub := reusedDelivery(t)
			c.late(crew, sub)
			// The delivery of sequence 3 still waits for its answer.
			crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":3`, ws.OpOK)
			crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-x","sequence":3`, pigeon.CodeAckNotAllowed)
		})
	}
}

// TestAckSequenceInABatch: in a messageIds frame, each id is settled at
// the sequence in step with it; 0 names none.
func TestAckSequenceInABatch(t *testing.T) {
	crew, sub := reusedDelivery(t)
	a := crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageIds":["other","job-x"],"sequences":[0,3]`, ws.OpOK)
	require.Empty(t, a.NotPending)
}

// TestPullAckSequenceOverWebSocket: a pull ack or nack frame may name the
// sequence received, as Engine.AckSequence takes it; the Go session's
// AckSequence and NackSequence send it.
func TestPullAckSequenceOverWebSocket(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, longAckWait)
	boss := v.dial(t, "boss-token", []string{"jobs.run"})
	crew := v.dial(t, "crew-token", []string{"jobs.run"})
	publish := func(id string, n int) {
		_, err := boss.Publish(ctx, &pigeon.Message{ID: id, Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{"n":` + strconv.Itoa(n) + `}`)})
		require.NoError(t, err)
	}
	publish("job-y", 1)
	got, err := crew.Receive(ctx, "jobs.run", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, uint64(1), got[0].Sequence)
	publish("other", 2)
	trimJobs(t, v, 1)
	publish("job-y", 3)
	got, err = crew.Receive(ctx, "jobs.run", 5)
	require.NoError(t, err)
	require.Len(t, got, 2)

	requireCodeOf(t, crew.AckSequence(ctx, "jobs.run", "job-y", 1), pigeon.CodeAckNotAllowed)
	requireCodeOf(t, crew.NackSequence(ctx, "jobs.run", "job-y", 1, 0), pigeon.CodeAckNotAllowed)
	got, err = crew.Receive(ctx, "jobs.run", 5)
	require.NoError(t, err)
	require.Empty(t, got, "sequence 3 is still leased to crew")
	require.NoError(t, crew.NackSequence(ctx, "jobs.run", "job-y", 3, 0))
	got, err = crew.Receive(ctx, "jobs.run", 5)
	require.NoError(t, err)
	require.Len(t, got, 1, "the late answers settled nothing")
	require.NoError(t, crew.AckSequence(ctx, "jobs.run", "job-y", 3))
}

// TestClientAcksTheSequenceItWasHanded: the Go client's acks and nacks
// of a subscription's deliveries name the sequence each delivery was
// handed over at, in a messageId frame and in a messageIds frame alike:
// a late answer to a message trimmed meanwhile never settles a newer
// message published under its id. A scripted server hands over job-x at
// sequence 1, other at 2 and job-x again at 3.
func TestClientAcksTheSequenceItWasHanded(t *testing.T) {
	type answered struct {
		op  string
		id  string
		seq uint64
	}
	got := make(chan answered, 16)
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		if !negotiated(ctx, c) {
			return
		}
		write := func(b []byte) bool { return c.Write(ctx, websocket.MessageText, b) == nil }
		f := readFrame(ctx, c)
		if f == nil || f.Op != ws.OpSubscribe || !write([]byte(`{"op":"subscribed","re":"`+f.ID+`","sub":"sub_1"}`)) {
			return
		}
		for i, id := range []string{"job-x", "other", "job-x"} {
			m, err := json.Marshal(&pigeon.Message{ID: id, Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{}`), Sequence: uint64(i + 1)})
			if err != nil || !write([]byte(`{"op":"deliver","sub":"sub_1","attempt":1,"message":`+string(m)+`}`)) {
				return
			}
		}
		for f := readFrame(ctx, c); f != nil; f = readFrame(ctx, c) {
			if f.MessageID != "" {
				got <- answered{f.Op, f.MessageID, f.Sequence}
			}
			for i, id := range f.MessageIDs {
				a := answered{f.Op, id, 0}
				if i < len(f.Sequences) {
					a.seq = f.Sequences[i]
				}
				got <- a
			}
			if !write([]byte(`{"op":"ok","re":"` + f.ID + `"}`)) {
				return
			}
		}
	})
	s := dialChat(t, url)
	sub, err := s.Subscribe(context.Background(), "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		if d.Message.Sequence == 3 {
			return pigeon.RetryAfter(0, errors.New("the newer job fails"))
		}
		return nil
	}, pigeon.WithGroup("g"), pigeon.WithMaxInFlight(3))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	var answers []answered
	for range 3 {
		select {
		case a := <-got:
			answers = append(answers, a)
		case <-time.After(hangBound):
			t.Fatalf("the client answered only %v", answers)
		}
	}
	require.ElementsMatch(t, []answered{{ws.OpAck, "job-x", 1}, {ws.OpAck, "other", 2}, {ws.OpNack, "job-x", 3}}, answers)
}

// TestClientAckFramesFitTheServersFrame: the acknowledgements gathered
// while an ack frame waits for its answer go in frames within the largest
// frame the server reads (its contract answer's maxFrame), not in one
// frame of them all, which a server refuses once a large window of long
// ids outgrows it: every ack in it was lost and each message came again.
func TestClientAckFramesFitTheServersFrame(t *testing.T) {
	const (
		maxFrame = 16 << 10
		count    = 100
	)
	id := func(i int) string { return strconv.Itoa(i) + "-" + strings.Repeat("x", 200) }
	var (
		handled    atomic.Int64
		firstRead  = make(chan struct{})
		allHandled = make(chan struct{})
		sizes      = make(chan int, count)
		acked      = make(chan [2]any, count)
	)
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		f := readFrame(ctx, c)
		write := func(b []byte) bool { return c.Write(ctx, websocket.MessageText, b) == nil }
		exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		if f == nil || f.Op != ws.OpNegotiate || !write([]byte(`{"op":"contract","re":"`+f.ID+`","maxFrame":`+strconv.Itoa(maxFrame)+
			`,"contract":{"id":"ctr_1","principal":"p","subjects":[],"expiresAt":"`+exp+`"}}`)) {
			return
		}
		if f = readFrame(ctx, c); f == nil || f.Op != ws.OpSubscribe || !write([]byte(`{"op":"subscribed","re":"`+f.ID+`","sub":"sub_1"}`)) {
			return
		}
		for i := range count {
			m, err := json.Marshal(&pigeon.Message{ID: id(i), Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{}`), Sequence: uint64(i + 1)})
			if err != nil || !write([]byte(`{"op":"deliver","sub":"sub_1","attempt":1,"message":`+string(m)+`}`)) {
				return
			}
		}
		for first := true; ; first = false {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			f, err := ws.DecodeFrame(b)
			if err != nil {
				return
			}
			sizes <- len(b)
			if f.MessageID != "" {
				acked <- [2]any{f.MessageID, f.Sequence}
			}
			for i, id := range f.MessageIDs {
				acked <- [2]any{id, f.Sequences[i]}
			}
			if first {
				// The first frame holds the first ack alone; the rest
				// gather while it waits for its answer.
				close(firstRead)
				select {
				case <-allHandled:
				case <-ctx.Done():
					return
				}
			}
			if !write([]byte(`{"op":"ok","re":"` + f.ID + `"}`)) {
				return
			}
		}
	})
	s := dialChat(t, url)
	sub, err := s.Subscribe(context.Background(), "jobs.run", func(ctx context.Context, d *pigeon.Delivery) error {
		if d.Message.Sequence > 1 {
			select {
			case <-firstRead:
			case <-ctx.Done():
			}
		}
		if handled.Add(1) == count {
			close(allHandled)
		}
		return nil
	}, pigeon.WithGroup("g"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	want := make(map[[2]any]bool, count)
	for i := range count {
		want[[2]any{id(i), uint64(i + 1)}] = true
	}
	frames := 0
	for len(want) > 0 {
		select {
		case a := <-acked:
			require.True(t, want[a], "acked once, with its sequence: %v", a)
			delete(want, a)
		case n := <-sizes:
			frames++
			require.LessOrEqual(t, n, maxFrame, "an ack frame within the server's maxFrame")
		case <-time.After(hangBound):
			t.Fatalf("%d acks never came", len(want))
		}
	}
	for len(sizes) > 0 {
		frames++
		require.LessOrEqual(t, <-sizes, maxFrame)
	}
	require.Greater(t, frames, 2, "the acks gathered behind the first frame went in more than one")
}
