package ws

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// paymentData is the payload of bench/compare's scenarios: a payment
// authorization of exactly 259 bytes.
const paymentData = `{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`

// deliveredPayment returns the nth payment message as the server delivers
// it: accepted, with the members the engine fills.
func deliveredPayment(n int) *pigeon.Message {
	return &pigeon.Message{
		SpecVersion: "1.0", ID: "msg_01JE4Q7ZK3M9X2B8V5N6T" + strconv.Itoa(1000+n), Type: "payment.authorization.requested",
		Source: "checkout", Subject: "payments.events", Time: "2026-12-02T05:00:00.123456789Z", Intent: "authorize_payment",
		IdempotencyKey: "k-" + strconv.Itoa(n), Classification: "pci", Region: "uk", Data: json.RawMessage(paymentData),
		Sequence: uint64(n + 1), ContractID: "ctr_01JE4Q7ZK3M9X2B8V5N6T7W8Y9", SubjectID: "payments.events@1",
		SchemaID: "payment.authorization.v1", AcceptedAt: "2026-12-02T05:00:00.123456789Z",
	}
}

// deliverBatchFrame renders a deliver_batch of n payments, as the server
// writes it.
func deliverBatchFrame(n int) []byte {
	b := append(appendHead(nil, OpDeliverBatch, ""), `,"sub":"sub_1","deliveries":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":1,"message":`...)
		b = append(deliveredPayment(i).AppendJSON(b), '}')
	}
	return append(b, "]}"...)
}

// handed is the Delivery a benchmark handed over last: a handler may keep
// it, so it is on the heap as it is for a handler.
var handed *pigeon.Delivery

// BenchmarkClientDecodeDeliverBatch is what a client's reader spends on a
// deliver_batch of payments (bench/compare's fan-out) up to the handler:
// the frame decoded as readLoop decodes it, and the Delivery of each
// message as a worker hands it over.
func BenchmarkClientDecodeDeliverBatch(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) {
			frame := deliverBatchFrame(n)
			cs := &clientSub{subject: "payments.events"}
			var in interner
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				f, err := decodeClientFrame(frame, &in)
				if err != nil || len(f.Deliveries) != n {
					b.Fatal("not decoded", err)
				}
				for i, d := range f.Deliveries {
					handed = cs.delivery(queuedDelivery{m: d.Message, attempt: d.Attempt, d: f.delivered[i]})
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// TestDeliveredMessagesOwnTheirBytes: a message a handler keeps does not
// change when the reader decodes later frames into the same buffer, nor
// when the handler changes its data, nor does any other message.
func TestDeliveredMessagesOwnTheirBytes(t *testing.T) {
	var in interner
	buf := make([]byte, 0, 64<<10)
	decode := func(frame []byte) *Frame {
		buf = append(buf[:0], frame...)
		f, err := decodeClientFrame(buf, &in)
		require.NoError(t, err)
		require.Len(t, f.Deliveries, 3)
		return f
	}
	first := decode(deliverBatchFrame(3))
	var kept, want []*pigeon.Message
	for _, d := range first.Deliveries {
		kept, want = append(kept, d.Message), append(want, d.Message.Clone())
	}
	require.Equal(t, deliveredPayment(0), kept[0])

	// The reader reuses its buffer: the next frame, as long, overwrites it.
	next := bytes.ReplaceAll(deliverBatchFrame(3), []byte("msg_01J"), []byte("msg_99X"))
	next = bytes.ReplaceAll(next, []byte("2026-12-02T05"), []byte("2027-01-09T11"))
	next = bytes.ReplaceAll(next, []byte("m-100"), []byte("z-999"))
	second := decode(next)
	require.Equal(t, want, kept)
	require.NotEqual(t, second.Deliveries[0].Message.ID, kept[0].ID)
	clear(buf[:cap(buf)])
	require.Equal(t, want, kept)

	// A handler changes or grows its message's data: nothing else moves.
	m := kept[1]
	require.Equal(t, len(m.Data), cap(m.Data), "data's capacity reaches past it")
	for i := range m.Data {
		m.Data[i] = 'x'
	}
	m.Data = append(m.Data, "yyyy"...)
	m.Data = m.Data[:0]
	m.Data = append(m.Data, `{"n":1}`...)
	w := want[1].Clone()
	w.Data = json.RawMessage(`{"n":1}`)
	require.Equal(t, w, m)
	require.Equal(t, want[0], kept[0])
	require.Equal(t, want[2], kept[2])
}

// BenchmarkClientDeliverBatch is BenchmarkClientDecodeDeliverBatch and
// what the reader does next, up to the handler: the frame's deliveries
// queued on their subscription (acknowledged, as bench/compare's), then
// taken off the queue with the Delivery a worker hands over.
func BenchmarkClientDeliverBatch(b *testing.B) {
	frame := deliverBatchFrame(64)
	s := &Session{o: dialOptions{logger: slog.New(slog.DiscardHandler)}}
	cs := &clientSub{s: s, subject: "payments.events"}
	cs.cond.L = &cs.mu
	s.bySID = map[string]*clientSub{"sub_1": cs}
	cc := &clientConn{ctx: context.Background()}
	// The connection is the session's, and sub_1 its subscription's id
	// on it: deliverOne routes only those.
	s.cc, cs.sidConn = cc, cc
	var in interner
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		f, err := decodeClientFrame(frame, &in)
		if err != nil {
			b.Fatal(err)
		}
		s.deliverBatch(cc, f)
		cs.mu.Lock()
		if len(cs.queue) != 64 {
			b.Fatal("not queued")
		}
		for _, q := range cs.queue {
			handed = cs.delivery(q)
		}
		cs.running.Add(-len(cs.queue))
		clear(cs.queue)
		cs.queue, cs.queuedN = cs.queue[:0], 0
		clear(cs.outstanding)
		cs.mu.Unlock()
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "msgs/s")
}
