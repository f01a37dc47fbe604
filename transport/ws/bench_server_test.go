package ws_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"pigeon/transport/ws"
)

// BenchmarkFanout100Server is BenchmarkFanout100 with subscribers that
// speak the protocol by hand and do next to nothing: each reads its
// deliver_batch frames, picks the message ids out of them and acks them
// in one frame, with buffers it reuses. So what ns/op and allocs/op count
// beyond the publisher's share is the server's work per delivery: the
// fan-out, the subscriptions' loops, the frames gathered and written, the
// acks read and settled. ns/op is per published message (100 deliveries);
// cpu-ns/delivery is the process's CPU time (user and system) per
// delivery, publisher and subscribers included, steadier than ns/op on a
// shared machine.
func BenchmarkFanout100Server(b *testing.B) {
	const subs = 100
	v := benchEnv(b)
	pub := v.dial(b, "alice-token", []string{"chat.messages"})
	target := int64(b.N) * subs
	var got atomic.Int64
	done := make(chan struct{})
	count := func(n int) {
		if got.Add(int64(n)) == target {
			close(done)
		}
	}
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, 0, subs)
	for range subs {
		r := v.raw(b, "bob-token")
		r.negotiate("chat.messages")
		// The Go client's default: a window of 256, deliver_batch frames.
		sub := r.ok(ws.OpSubscribe, `,"subject":"chat.messages","window":256,"batch":true`, ws.OpSubscribed).Sub
		conns = append(conns, r.c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rawAcker(r.c, sub, count)
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	publishN(b, pub, b.N)
	<-done
	cpu = cpuTime() - cpu
	b.StopTimer()
	b.ReportMetric(float64(target)/b.Elapsed().Seconds(), "deliveries/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(target), "cpu-ns/delivery")
	for _, c := range conns {
		_ = c.CloseNow()
	}
	wg.Wait()
}

// rawAcker acks every delivery of sub that c receives, one ack frame per
// deliver_batch frame, until c fails; count is told how many each frame
// held.
func rawAcker(c *websocket.Conn, sub string, count func(int)) {
	var (
		buf   = make([]byte, 0, 64<<10)
		ack   []byte
		n     int
		head  = []byte(`{"op":"deliver_batch"`)
		idKey = []byte(`,"id":"`)
	)
	for {
		_, r, err := c.Reader(context.Background())
		if err != nil {
			return
		}
		if buf, err = readInto(buf[:0], r); err != nil {
			return
		}
		if !bytes.HasPrefix(buf, head) {
			continue // the answer to an ack
		}
		n++
		ack = append(ack[:0], `{"op":"ack","id":"a`...)
		ack = strconv.AppendInt(ack, int64(n), 10)
		ack = append(ack, `","sub":"`...)
		ack = append(ack, sub...)
		ack = append(ack, `","messageIds":[`...)
		k := 0
		for i := 0; ; k++ {
			j := bytes.Index(buf[i:], idKey)
			if j < 0 {
				break
			}
			s := i + j + len(idKey)
			e := s + bytes.IndexByte(buf[s:], '"')
			if k > 0 {
				ack = append(ack, ',')
			}
			ack = append(append(append(ack, '"'), buf[s:e]...), '"')
			i = e
		}
		ack = append(ack, "]}"...)
		if err := c.Write(context.Background(), websocket.MessageText, ack); err != nil {
			return
		}
		count(k)
	}
}

// readInto appends what r holds to b.
func readInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}
