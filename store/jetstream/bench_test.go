package jetstream

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/wal"
)

// benchIDs numbers the ids publishers choose in the benchmarks.
var benchIDs atomic.Uint64

// BenchmarkPublish compares, in one run, governed publishes (every gate,
// the store, the audit record) on the WAL store, on JetStream R1 and on
// JetStream R3 (three NATS servers as child processes), with raw
// JetStream publishes of the same bytes. "seq" is one publisher (its
// ns/op is the latency), "par" is 16 at once (ns/op is 1/throughput);
// "governed-id" publishes under ids the publisher chose, which the broker
// looks up before taking.
func BenchmarkPublish(b *testing.B) {
	body := chatMsg("lobby", "a benchmark message of a realistic size, about as long as a chat line")
	single := runServer(b)
	cluster := startNATSCluster(b)

	engines := []struct {
		name string
		open func(b *testing.B) *pigeon.Engine
	}{
		{"wal", func(b *testing.B) *pigeon.Engine {
			s, err := wal.Open(b.TempDir(), nil)
			require.NoError(b, err)
			o := clusterOptions()
			o.Store = s
			e, err := pigeon.New(context.Background(), o)
			require.NoError(b, err)
			b.Cleanup(func() { e.Shutdown(context.Background()); s.Close(context.Background()) })
			return e
		}},
		{"jetstream-R1", func(b *testing.B) *pigeon.Engine {
			s, err := Connect(b.Context(), single.ClientURL(), &Options{Prefix: freshPrefix()})
			require.NoError(b, err)
			cl, err := NewCluster(b.Context(), s)
			require.NoError(b, err)
			o := clusterOptions()
			o.Store, o.Cluster = s, cl
			e, err := pigeon.New(context.Background(), o)
			require.NoError(b, err)
			b.Cleanup(func() { e.Shutdown(context.Background()); s.Close(context.Background()) })
			return e
		}},
		{"jetstream-R3", func(b *testing.B) *pigeon.Engine {
			return cluster.startPigeon(b, 0, freshPrefix(), nil).e
		}},
	}
	for _, eng := range engines {
		e := eng.open(b)
		sess, err := e.Connect(b.Context(), "bob-token", []string{"chat.messages"})
		require.NoError(b, err)
		b.Run("governed/"+eng.name+"/seq", func(b *testing.B) {
			for b.Loop() {
				if _, err := sess.Publish(b.Context(), body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("governed-id/"+eng.name+"/seq", func(b *testing.B) {
			// An id the publisher chose, new each time: the broker looks
			// it up before it takes it.
			for b.Loop() {
				m := *body
				m.ID = "msg_bench_" + strconv.FormatUint(benchIDs.Add(1), 36)
				if _, err := sess.Publish(b.Context(), &m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("governed/"+eng.name+"/par", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := sess.Publish(context.Background(), body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}

	// Raw JetStream publishes of the stored bytes of one message.
	raw, err := engines[1].open(b).Connect(b.Context(), "bob-token", []string{"chat.messages"})
	require.NoError(b, err)
	res, err := raw.Publish(b.Context(), body)
	require.NoError(b, err)
	payload := []byte(fmt.Sprintf("%v", res.Message)) // same order of size as the envelope
	for _, r := range []struct {
		name     string
		url      string
		replicas int
	}{{"R1", single.ClientURL(), 1}, {"R3", cluster.nodes[0].url(), 3}} {
		nc := connect(b, r.url)
		js, err := jetstream.New(nc)
		require.NoError(b, err)
		name := freshPrefix() + "_RAW"
		_, err = js.CreateStream(b.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{name}, Replicas: r.replicas})
		require.NoError(b, err)
		b.Run("raw/jetstream-"+r.name+"/seq", func(b *testing.B) {
			for b.Loop() {
				if _, err := js.Publish(b.Context(), name, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("raw/jetstream-"+r.name+"/par", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := js.Publish(context.Background(), name, payload); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkFanOutAcrossNodes publishes on node 1 of an R3 cluster to a
// subscriber on node 2 and one on node 3; ns/op is per message delivered
// to both.
func BenchmarkFanOutAcrossNodes(b *testing.B) {
	cluster := startNATSCluster(b)
	prefix := freshPrefix()
	var nodes []*pigeonNode
	for i := range 3 {
		nodes = append(nodes, cluster.startPigeon(b, i, prefix, nil))
	}
	var got atomic.Int64
	for _, p := range nodes[1:] {
		sess, err := p.e.Connect(b.Context(), "alice-token", []string{"chat.messages"})
		require.NoError(b, err)
		_, err = sess.Subscribe(b.Context(), "chat.messages", func(context.Context, *pigeon.Delivery) error {
			got.Add(1)
			return nil
		})
		require.NoError(b, err)
	}
	pub, err := nodes[0].e.Connect(b.Context(), "bob-token", []string{"chat.messages"})
	require.NoError(b, err)
	body := chatMsg("lobby", "fan-out")
	b.ResetTimer()
	n := 0
	for b.Loop() {
		if _, err := pub.Publish(b.Context(), body); err != nil {
			b.Fatal(err)
		}
		n++
	}
	for deadline := time.Now().Add(time.Minute); got.Load() < int64(2*n); {
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d", got.Load(), 2*n)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkRevokeAcrossNodes revokes, on node 1 of three (R3), a contract
// negotiated for the purpose; ns/op is one revocation including its wait
// until nodes 2 and 3 confirm it. The negotiation is outside the timer.
func BenchmarkRevokeAcrossNodes(b *testing.B) {
	cluster := startNATSCluster(b)
	prefix := freshPrefix()
	var nodes []*pigeonNode
	for i := range 3 {
		nodes = append(nodes, cluster.startPigeon(b, i, prefix, func(o *pigeon.Options) {
			o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: -1}
		}))
	}
	e := nodes[0].e
	alice, err := clusterOptions().Authenticator.Authenticate(b.Context(), "alice-token")
	require.NoError(b, err)
	for b.Loop() {
		b.StopTimer()
		sess, err := e.Connect(b.Context(), "alice-token", []string{"chat.messages"})
		require.NoError(b, err)
		b.StartTimer()
		if err := e.RevokeContract(b.Context(), alice, sess.Contract().ID()); err != nil {
			b.Fatal(err)
		}
	}
}
