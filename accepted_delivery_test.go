package pigeon_test

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
)

// TestDeliveredEncodingIsJudged: the bytes a subscriber is sent of a
// message (Delivery.AppendMessageJSON, what every transport writes),
// published alone or in a batch, are the stored envelope with the
// message's sequence and acceptance time, and the data in them is byte
// for byte the data the gates judged, for data of escapes, unicode,
// odd spacing, numbers at the edges of the short path, and members named
// as the envelope's own.
func TestDeliveredEncodingIsJudged(t *testing.T) {
	datas := transporttest.JudgedData
	st := memory.New(nil)
	var judgedMu sync.Mutex
	judged := map[string]string{} // message id -> the data the gates saw
	f := newFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.Gates = append(o.Gates, pigeon.GateFunc("witness", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
			judgedMu.Lock()
			defer judgedMu.Unlock()
			judged[a.Message.ID] = string(a.Message.Data)
			return pigeon.Allow()
		}))
	})
	pub := f.connect("checkout-token", "payments.authorize")
	sub := f.connect("gateway-token", "payments.authorize")
	var sentMu sync.Mutex
	sent := map[string][]byte{}
	_, err := sub.Subscribe(ctx, "payments.authorize", func(_ context.Context, d *pigeon.Delivery) error {
		sentMu.Lock()
		defer sentMu.Unlock()
		sent[d.Message.ID] = d.AppendMessageJSON(nil)
		return nil
	})
	require.NoError(t, err)

	var msgs []*pigeon.Message
	for i := range 3 * len(datas) { // past one run of the memory store's batches
		m := demo.Payment("o-" + strconv.Itoa(i))
		m.Data = json.RawMessage(strings.Replace(datas[i%len(datas)], "%d", strconv.Itoa(i), 1))
		if i%4 == 1 {
			m.Hops = 7 // the broker's depth, never the publisher's
		}
		msgs = append(msgs, m)
	}
	var results []*pigeon.Result
	alone, err := pub.Publish(ctx, msgs[0])
	require.NoError(t, err)
	results = append(results, alone)
	for i, p := range f.e.PublishBatch(ctx, callerOf(pub), msgs[1:]) {
		require.NoError(t, p.Err, "message %d", i+1)
		results = append(results, p.Result)
	}
	require.Eventually(t, func() bool {
		sentMu.Lock()
		defer sentMu.Unlock()
		return len(sent) == len(results)
	}, 10*time.Second, 5*time.Millisecond)

	sentMu.Lock()
	defer sentMu.Unlock()
	judgedMu.Lock()
	defer judgedMu.Unlock()
	for i, res := range results {
		id := res.Message.ID
		sm, err := st.Lookup(ctx, id)
		require.NoError(t, err)
		got := sent[id]
		require.Equal(t, string(res.AppendMessageJSON(nil)), string(got), "message %d: the answer and the delivery are one encoding", i)

		var m pigeon.Message
		require.NoError(t, json.Unmarshal(got, &m), "message %d: %s", i, got)
		require.Equal(t, strings.TrimSpace(judged[id]), string(m.Data), "message %d: the data sent is the data judged", i)
		require.Equal(t, sm.Seq, m.Sequence)
		require.Zero(t, m.Hops)
		m.Data = json.RawMessage(judged[id]) // with the spacing the gates saw around it
		require.Equal(t, string(m.AppendJSON(nil)), string(got), "message %d: the encoding sent is the message's own", i)

		stored := strings.Replace(string(got), `,"sequence":`+strconv.FormatUint(sm.Seq, 10), "", 1)
		stored = strings.Replace(stored, `,"acceptedAt":"`+m.AcceptedAt+`"`, "", 1)
		require.Equal(t, string(sm.Body), stored, "message %d: what is sent is what is stored", i)
	}
}

// TestReplayedEncodingIsStored: a message its subscribers read back from
// the store (none subscribed when it was published, so the recent cache
// holds nothing of it) is sent as the stored envelope with its sequence
// and acceptance time, byte for byte, as a live subscriber is sent it:
// data sent with spacing around it is judged, stored and sent as the
// value alone, alone and in a batch, and the publisher's brief answer
// still leaves it out.
func TestReplayedEncodingIsStored(t *testing.T) {
	st := memory.New(nil)
	f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
	pub := f.connect("checkout-token", "payments.authorize")
	var msgs []*pigeon.Message
	for i, pad := range []string{" ", "\n\t", "\r\n  ", ""} {
		m := demo.Payment("o-replayed-" + strconv.Itoa(i))
		m.Data = json.RawMessage(pad + string(m.Data) + pad)
		msgs = append(msgs, m)
	}
	var results []*pigeon.Result
	res, err := pub.Publish(ctx, msgs[0])
	require.NoError(t, err)
	results = append(results, res)
	for _, p := range f.e.PublishBatch(ctx, callerOf(pub), msgs[1:]) {
		require.NoError(t, p.Err)
		results = append(results, p.Result)
	}

	sub := f.connect("gateway-token", "payments.authorize")
	var mu sync.Mutex
	sent := map[string]string{}
	_, err = sub.Subscribe(ctx, "payments.authorize", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		sent[d.Message.ID] = string(d.AppendMessageJSON(nil))
		return nil
	}, pigeon.WithStart(pigeon.StartAt(1)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) == len(results) }, 10*time.Second, 5*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i, res := range results {
		sm, err := st.Lookup(ctx, res.Message.ID)
		require.NoError(t, err)
		got := sent[res.Message.ID]
		stored := strings.Replace(got, `,"sequence":`+strconv.FormatUint(sm.Seq, 10), "", 1)
		stored = strings.Replace(stored, `,"acceptedAt":"`+res.Message.AcceptedAt+`"`, "", 1)
		require.Equal(t, string(sm.Body), stored, "message %d: what is sent is what is stored", i)
		require.NotContains(t, string(res.AppendBriefJSON(nil)), `"data"`, "message %d: the brief answer leaves the data out", i)
	}
}
