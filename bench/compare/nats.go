package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServer is an embedded nats-server on 127.0.0.1 (a random port),
// with JetStream on file storage in a temp dir when asked.
type natsServer struct {
	s   *natsserver.Server
	dir string
}

// jetStreamMode says whether and how the server runs JetStream.
type jetStreamMode int

const (
	noJetStream         jetStreamMode = iota
	jetStreamNoSync                   // JetStream's default: fsync every 2 minutes
	jetStreamSyncAlways               // sync_always: fsync after every write
)

func startNATS(mode jetStreamMode) (*natsServer, error) {
	o := &natsserver.Options{Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true}
	ns := &natsServer{}
	if mode != noJetStream {
		dir, err := os.MkdirTemp("", "compare-js-")
		if err != nil {
			return nil, err
		}
		ns.dir = dir
		o.JetStream, o.StoreDir, o.SyncAlways = true, dir, mode == jetStreamSyncAlways
	}
	s, err := natsserver.NewServer(o)
	if err != nil {
		ns.close()
		return nil, err
	}
	ns.s = s
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		ns.close()
		return nil, errors.New("nats-server did not start")
	}
	return ns, nil
}

func (ns *natsServer) connect() (*nats.Conn, error) {
	return nats.Connect(ns.s.ClientURL(), nats.MaxReconnects(0))
}

func (ns *natsServer) close() {
	if ns.s != nil {
		ns.s.Shutdown()
		ns.s.WaitForShutdown()
	}
	if ns.dir != "" {
		_ = os.RemoveAll(ns.dir)
	}
}

// natsWindow bounds how many messages a core NATS publisher may run ahead
// of its slowest subscriber, over all subscribers: core NATS has no flow
// control, and a subscriber that falls too far behind is cut off as a
// slow consumer. 64k messages of 259 bytes stay well under the server's
// 64 MiB of pending data per connection.
const natsWindow = 64 << 10

// natsPublishLoad publishes payload on subject from one goroutine until ctx
// ends, never more than ahead messages beyond behind(), which returns how
// many the slowest subscriber has received.
func natsPublishLoad(ctx context.Context, nc *nats.Conn, subject string, ahead int64, published *atomic.Int64, behind func() int64) error {
	for ctx.Err() == nil {
		for published.Load()-behind() > ahead {
			if ctx.Err() != nil {
				return nil
			}
			time.Sleep(50 * time.Microsecond)
		}
		for range 256 {
			if err := nc.Publish(subject, payload); err != nil {
				return err
			}
		}
		published.Add(256)
	}
	return nil
}

// natsSubscribers subscribes n connections to subject, each counting what
// it receives into got and into its own counter, returned in order.
func natsSubscribers(ns *natsServer, subject string, n int, got *atomic.Int64) ([]*nats.Conn, []*atomic.Int64, error) {
	var conns []*nats.Conn
	counts := make([]*atomic.Int64, n)
	for i := range n {
		nc, err := ns.connect()
		if err != nil {
			closeAll(conns)
			return nil, nil, err
		}
		conns = append(conns, nc)
		mine := new(atomic.Int64)
		counts[i] = mine
		sub, err := nc.Subscribe(subject, func(*nats.Msg) { mine.Add(1); got.Add(1) })
		if err == nil {
			err = sub.SetPendingLimits(-1, -1)
		}
		if err == nil {
			err = nc.Flush()
		}
		if err != nil {
			closeAll(conns)
			return nil, nil, err
		}
	}
	return conns, counts, nil
}

// slowest returns the smallest of counts.
func slowest(counts []*atomic.Int64) int64 {
	low := counts[0].Load()
	for _, c := range counts[1:] {
		low = min(low, c.Load())
	}
	return low
}

func closeAll(conns []*nats.Conn) {
	for _, nc := range conns {
		nc.Close()
	}
}

// natsPubSub is 1 publisher → subs subscribers over TCP: deliveries/s
// and publisher msgs/s.
func natsPubSub(subs int) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		ns, err := startNATS(noJetStream)
		if err != nil {
			return result{}, err
		}
		defer ns.close()
		var got, published atomic.Int64
		conns, counts, err := natsSubscribers(ns, eventsSubject, subs, &got)
		if err != nil {
			return result{}, err
		}
		defer closeAll(conns)
		pub, err := ns.connect()
		if err != nil {
			return result{}, err
		}
		defer pub.Close()
		ahead := max(256, natsWindow/int64(subs))
		r, err := runLoad(ctx, c, func(ctx context.Context) error {
			return natsPublishLoad(ctx, pub, eventsSubject, ahead, &published, func() int64 { return slowest(counts) })
		}, &got, &published)
		for _, nc := range conns {
			if err == nil && nc.IsClosed() {
				err = errors.New("a subscriber's connection was closed (slow consumer?)")
			}
		}
		return r, err
	}
}

// natsRequestReply is the p50 of a core NATS request whose responder, on
// another connection, answers replyJSON.
func natsRequestReply(ctx context.Context, c config) (result, error) {
	ns, err := startNATS(noJetStream)
	if err != nil {
		return result{}, err
	}
	defer ns.close()
	responder, err := ns.connect()
	if err != nil {
		return result{}, err
	}
	defer responder.Close()
	if _, err := responder.Subscribe(replySubject, func(m *nats.Msg) { _ = m.Respond([]byte(replyJSON)) }); err != nil {
		return result{}, err
	}
	if err := responder.Flush(); err != nil {
		return result{}, err
	}
	nc, err := ns.connect()
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	return latencies(ctx, c, func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, replySubject, payload)
		return err
	})
}

// jetStream connects to a JetStream server and creates a file-storage
// stream on eventsSubject.
func jetStream(ctx context.Context, ns *natsServer) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := ns.connect()
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{eventsSubject}, Storage: jetstream.FileStorage})
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// jetStreamDurable is publishers goroutines on one connection, each
// publishing and waiting for the stream's ack: acked msgs/s.
func jetStreamDurable(mode jetStreamMode, publishers int) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		ns, err := startNATS(mode)
		if err != nil {
			return result{}, err
		}
		defer ns.close()
		nc, js, err := jetStream(ctx, ns)
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		var acked atomic.Int64
		return runLoad(ctx, c, func(ctx context.Context) error {
			return workers(ctx, publishers, func(ctx context.Context) error {
				if _, err := js.Publish(ctx, eventsSubject, payload); err != nil {
					return err
				}
				acked.Add(1)
				return nil
			})
		}, &acked)
	}
}

// jetStreamSync is the p50 of one synchronous JetStream publish with
// sync_always: the ack comes after the message is fsynced.
func jetStreamSync(ctx context.Context, c config) (result, error) {
	ns, err := startNATS(jetStreamSyncAlways)
	if err != nil {
		return result{}, err
	}
	defer ns.close()
	nc, js, err := jetStream(ctx, ns)
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	return latencies(ctx, c, func(ctx context.Context) error {
		_, err := js.Publish(ctx, eventsSubject, payload)
		return err
	})
}
