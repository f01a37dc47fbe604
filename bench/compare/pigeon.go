package main

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"pigeon"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
	"pigeon/transport/ws"
)

// storeKind is the store a Pigeon scenario runs on.
type storeKind int

const (
	memoryStore storeKind = iota // in memory: what `pigeon serve --sync none` stands for here
	walStore                     // store/wal on defaults: SyncBatch, fsynced before the answer
)

// pigeonEnv is one Pigeon broker on defaults: an engine on its store and,
// when network is asked, the standalone server (HTTP API and WebSocket at
// /v1/ws) on 127.0.0.1.
type pigeonEnv struct {
	e    *pigeon.Engine
	st   store.Store
	dir  string
	srv  *server.Server
	addr string
	done chan struct{}
}

func startPigeon(ctx context.Context, kind storeKind, network bool) (_ *pigeonEnv, err error) {
	p := &pigeonEnv{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	switch kind {
	case walStore:
		if p.dir, err = os.MkdirTemp("", "compare-wal-"); err != nil {
			return nil, err
		}
		if p.st, err = wal.Open(p.dir, nil); err != nil {
			return nil, err
		}
	default:
		p.st = memory.New(nil)
	}
	if p.e, err = pigeon.New(ctx, engineOptions(p.st)); err != nil {
		return nil, err
	}
	if !network {
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.srv, p.addr, p.done = server.New(p.e, nil), l.Addr().String(), make(chan struct{})
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(l)
	}()
	return p, nil
}

// close stops the server, the engine and the store, and removes the
// store's files.
func (p *pigeonEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if p.srv != nil {
		_ = p.srv.Shutdown(ctx)
		<-p.done
	}
	if p.e != nil {
		_ = p.e.Shutdown(ctx)
	}
	if p.st != nil {
		_ = p.st.Close(ctx)
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// session connects token to subject, over WebSocket when network is set
// and in process otherwise.
func (p *pigeonEnv) session(ctx context.Context, network bool, token, subject string) (pigeon.Session, error) {
	if network {
		return ws.Dial(ctx, "ws://"+p.addr+"/v1/ws", token, []string{subject})
	}
	return p.e.Connect(ctx, token, []string{subject})
}

// sessions tracks what a scenario opened, to close it at the end.
type sessions []pigeon.Session

func (ss *sessions) open(ctx context.Context, p *pigeonEnv, network bool, token, subject string) (pigeon.Session, error) {
	s, err := p.session(ctx, network, token, subject)
	if err == nil {
		*ss = append(*ss, s)
	}
	return s, err
}

func (ss sessions) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range ss {
		_ = s.Close(ctx)
	}
}

// withPigeon runs body on a fresh Pigeon (kind of store, its WebSocket
// listener when network is set) and closes, after it, the sessions body
// opened through ss and then the environment.
func withPigeon(ctx context.Context, kind storeKind, network bool, body func(p *pigeonEnv, ss *sessions) (result, error)) (result, error) {
	p, err := startPigeon(ctx, kind, network)
	if err != nil {
		return result{}, err
	}
	defer p.close()
	var ss sessions
	defer func() { ss.close() }() // the sessions opened by then, not the nil slice of now
	return body(p, &ss)
}

// pigeonWSPublishLoad publishes next() on the WebSocket session s until ctx
// ends, counting every message answered "accepted" in published. It
// pipelines with the client's asynchronous publish: one goroutine sends
// (PublishAsync blocks only while the client's in-flight bound is full,
// and what queues meanwhile leaves as one publish_batch frame), another
// takes the answers in order. A publish answered RATE_LIMITED (the
// endpoint's per-connection limit) is counted in refused and sent again.
func pigeonWSPublishLoad(ctx context.Context, s *ws.Session, next func() *pigeon.Message, published, refused *atomic.Int64) error {
	type sent struct {
		p *ws.PendingPublish
		m *pigeon.Message
	}
	pending := make(chan sent, ws.DefaultMaxPendingPublishes)
	answered := make(chan error, 1)
	go func() {
		var first error
		for q := range pending {
			res, err := q.p.Wait(context.Background())
			var pe *pigeon.Error
			switch {
			case err == nil && res.Status == "accepted":
				published.Add(1)
			case err == nil:
				first = cmp.Or(first, errors.New("publish answered "+res.Status))
			case errors.As(err, &pe) && pe.Code == pigeon.CodeRateLimited && first == nil:
				refused.Add(1)
				first = cmp.Or(first, publishOne(ctx, s, q.m, published, refused))
			case ctx.Err() == nil:
				first = cmp.Or(first, err)
			}
		}
		answered <- first
	}()
	var err error
	for ctx.Err() == nil {
		m := next()
		var p *ws.PendingPublish
		if p, err = s.PublishAsync(ctx, m); err != nil {
			break
		}
		pending <- sent{p, m}
	}
	close(pending)
	if aerr := <-answered; aerr != nil {
		return aerr
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// publishLoad publishes next() on s from n goroutines until ctx ends; see
// pigeonWSPublishLoad.
func publishLoad(ctx context.Context, s pigeon.Session, n int, next func() *pigeon.Message, published, refused *atomic.Int64) error {
	return workers(ctx, n, func(ctx context.Context) error {
		return publishOne(ctx, s, next(), published, refused)
	})
}

// publishOne publishes m until it is accepted, retrying after a
// millisecond each time it is answered RATE_LIMITED.
func publishOne(ctx context.Context, s pigeon.Session, m *pigeon.Message, published, refused *atomic.Int64) error {
	for {
		res, err := s.Publish(ctx, m)
		var pe *pigeon.Error
		switch {
		case err == nil && res.Status == "accepted":
			published.Add(1)
			return nil
		case err == nil:
			return errors.New("publish answered " + res.Status)
		case errors.As(err, &pe) && pe.Code == pigeon.CodeRateLimited:
			refused.Add(1)
			if err := sleep(ctx, time.Millisecond); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// refusedNote says how many publishes the rate limit refused, if any.
func refusedNote(refused *atomic.Int64) string {
	if n := refused.Load(); n > 0 {
		return "publishes answered RATE_LIMITED and retried: " + itoa(n)
	}
	return ""
}

// pigeonPubSub is 1 publisher → subs subscribers (none: the publish path
// alone, its rate the publisher's) on eventsSubject, over
// WebSocket (each session on its own connection) or in process:
// deliveries/s and publisher msgs/s. In process the publisher is one
// goroutine; over WebSocket it is pigeonWSPublishLoad. The subscriptions
// take opts (none: acknowledged, on the defaults).
func pigeonPubSub(network bool, subs int, opts ...pigeon.SubscribeOption) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		return withPigeon(ctx, memoryStore, network, func(p *pigeonEnv, ss *sessions) (result, error) {
			var got, published, refused atomic.Int64
			for range subs {
				s, err := ss.open(ctx, p, network, receiverToken, eventsSubject)
				if err != nil {
					return result{}, err
				}
				if _, err := s.Subscribe(ctx, eventsSubject, func(context.Context, *pigeon.Delivery) error {
					got.Add(1)
					return nil
				}, opts...); err != nil {
					return result{}, err
				}
			}
			pub, err := ss.open(ctx, p, network, publisherToken, eventsSubject)
			if err != nil {
				return result{}, err
			}
			gen := &messages{subject: eventsSubject}
			counters := []*atomic.Int64{&got, &published}
			if subs == 0 {
				// The publish path alone: the ceiling of the rows above it.
				counters = counters[1:]
			}
			r, err := runLoad(ctx, c, func(ctx context.Context) error {
				if network {
					return pigeonWSPublishLoad(ctx, pub.(*ws.Session), gen.next, &published, &refused)
				}
				return publishLoad(ctx, pub, 1, gen.next, &published, &refused)
			}, counters...)
			r.note = refusedNote(&refused)
			return r, err
		})
	}
}

// pigeonDurable is publishers goroutines publishing on eventsSubject on
// the WAL store, in process, or over WebSocket through
// pigeonWSPublishLoad: accepted msgs/s, each fsynced before its answer.
func pigeonDurable(network bool, publishers int) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		return withPigeon(ctx, walStore, network, func(p *pigeonEnv, ss *sessions) (result, error) {
			pub, err := ss.open(ctx, p, network, publisherToken, eventsSubject)
			if err != nil {
				return result{}, err
			}
			gen := &messages{subject: eventsSubject}
			var published, refused atomic.Int64
			r, err := runLoad(ctx, c, func(ctx context.Context) error {
				if network {
					return pigeonWSPublishLoad(ctx, pub.(*ws.Session), gen.next, &published, &refused)
				}
				return publishLoad(ctx, pub, publishers, gen.next, &published, &refused)
			}, &published)
			r.note = refusedNote(&refused)
			return r, err
		})
	}
}

// pigeonSync is the p50 of one publish on the WAL store, waited for before
// the next, in process or over WebSocket.
func pigeonSync(network bool) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		return withPigeon(ctx, walStore, network, func(p *pigeonEnv, ss *sessions) (result, error) {
			pub, err := ss.open(ctx, p, network, publisherToken, eventsSubject)
			if err != nil {
				return result{}, err
			}
			gen := &messages{subject: eventsSubject}
			var published, refused atomic.Int64
			return latencies(ctx, c, func(ctx context.Context) error {
				return publishOne(ctx, pub, gen.next(), &published, &refused)
			})
		})
	}
}

// pigeonRequestReply is the p50 of a request on replySubject answered by a
// gateway session's handler, both sessions over WebSocket or in process.
func pigeonRequestReply(network bool) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		return withPigeon(ctx, memoryStore, network, func(p *pigeonEnv, ss *sessions) (result, error) {
			responder, err := ss.open(ctx, p, network, receiverToken, replySubject)
			if err != nil {
				return result{}, err
			}
			if _, err := responder.Subscribe(ctx, replySubject, func(ctx context.Context, d *pigeon.Delivery) error {
				_, err := d.Session.Publish(ctx, reply(d.Message))
				return err
			}); err != nil {
				return result{}, err
			}
			requester, err := ss.open(ctx, p, network, publisherToken, replySubject)
			if err != nil {
				return result{}, err
			}
			gen := &messages{subject: replySubject}
			return latencies(ctx, c, func(ctx context.Context) error {
				_, err := requester.Request(ctx, gen.next())
				return err
			})
		})
	}
}

// httpURL is the base URL of the environment's HTTP API.
func (p *pigeonEnv) httpURL() string { return "http://" + p.addr }

var _ http.Handler = (*server.Server)(nil)
