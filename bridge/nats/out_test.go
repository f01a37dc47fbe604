package natsbridge

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// An Out route publishes each delivery as the exact envelope bytes the
// broker's subscribers receive, with its headers, on core NATS and on
// JetStream, in process and over WebSocket.
func TestOut(t *testing.T) {
	for _, tr := range transports {
		for _, jsMode := range []bool{false, true} {
			t.Run(tr.name+"/jetstream="+strconv.FormatBool(jsMode), func(t *testing.T) {
				v := newEnv(t)
				var sub *nats.Subscription
				var st jetstream.Stream
				if jsMode {
					st = v.stream(t, "ORDERS", "bridge.orders")
				} else {
					var err error
					sub, err = v.tc.SubscribeSync("bridge.orders")
					require.NoError(t, err)
					require.NoError(t, v.tc.Flush())
				}
				rb := start(t, Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
					{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders", JetStream: jsMode, Stream: map[bool]string{true: "ORDERS"}[jsMode]},
				}})
				pub := publisher(t, v.e)
				var want []*pigeon.Result
				for i := range 3 {
					res, err := pub.Publish(t.Context(), order("o-"+strconv.Itoa(i)))
					require.NoError(t, err)
					want = append(want, res)
				}
				for i, res := range want {
					var data []byte
					var h nats.Header
					if jsMode {
						m, err := st.GetMsg(t.Context(), uint64(i+1))
						if err != nil {
							require.Eventually(t, func() bool { m, err = st.GetMsg(t.Context(), uint64(i+1)); return err == nil }, 30*time.Second, 5*time.Millisecond)
						}
						data, h = m.Data, m.Header
					} else {
						m, err := sub.NextMsg(30 * time.Second)
						require.NoError(t, err)
						data, h = m.Data, m.Header
					}
					require.Equal(t, string(res.AppendMessageJSON(nil)), string(data), "the envelope bytes the broker's subscribers get")
					require.Equal(t, res.Message.ID, h.Get("Nats-Msg-Id"))
					require.Equal(t, ordersSubject, h.Get("Pigeon-Subject"))
					require.Equal(t, strconv.FormatUint(res.Message.Sequence, 10), h.Get("Pigeon-Sequence"))
					require.Equal(t, "orders-out", h.Get("Pigeon-Bridge"))
					back, err := pigeon.DecodeMessage(data)
					require.NoError(t, err)
					require.Equal(t, appPrin, back.Source)
				}
				require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 3 }, 30*time.Second, 5*time.Millisecond)
				s := rb.b.Stats()
				require.True(t, s.Connected)
				require.Equal(t, bridgePrin, s.Principal)
				require.NotEmpty(t, s.ContractID)
			})
		}
	}
}

// A delivery is acknowledged only once JetStream stored it: while no stream
// takes the subject the publish fails and the broker redelivers; once a
// stream exists the message lands in it exactly once.
func TestOutJetStreamAcksAfterPubAck(t *testing.T) {
	v := newEnv(t)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, PublishTimeout: time.Second, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "late.orders", JetStream: true},
	}})
	res, err := publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Retried >= 2 }, 30*time.Second, 5*time.Millisecond,
		"the publish fails while no stream takes the subject, and the broker redelivers")
	require.Zero(t, routeStats(rb.b, "orders-out").Forwarded)

	st := v.stream(t, "LATE", "late.orders")
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a second copy would have come by now
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "the message arrived once")
	m, err := st.GetMsg(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, res.Message.ID, m.Header.Get("Nats-Msg-Id"))
}

// On core NATS a delivery is acknowledged only after a flush: with the
// NATS server down the publish fails and the broker redelivers; once the
// server is back the message arrives, once.
func TestOutCoreAcksAfterFlush(t *testing.T) {
	dir := t.TempDir()
	ns := runNATS(t, -1, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	url := ns.ClientURL()
	e := newEngine(t)
	tc := connectNATS(t, url, 10*time.Millisecond) // back well before the bridge
	sub, err := tc.SubscribeSync("bridge.orders")
	require.NoError(t, err)
	require.NoError(t, tc.Flush())
	nc := connectNATS(t, url, 300*time.Millisecond)
	rb := start(t, Options{Dialer: transports[0].dialer(t, e), Credential: bridgeToken, NATS: nc, PublishTimeout: 200 * time.Millisecond, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
	}})

	ns.Shutdown()
	ns.WaitForShutdown()
	require.Eventually(t, func() bool { return !nc.IsConnected() }, 30*time.Second, 5*time.Millisecond)
	res, err := publisher(t, e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Retried >= 2 }, 30*time.Second, 5*time.Millisecond,
		"NATS did not take it, and the broker redelivers")
	require.Zero(t, routeStats(rb.b, "orders-out").Forwarded)

	runNATS(t, port, dir)
	m, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	require.Equal(t, res.Message.ID, m.Header.Get("Nats-Msg-Id"))
	require.Equal(t, string(res.AppendMessageJSON(nil)), string(m.Data))
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
	_, err = sub.NextMsg(200 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "the message arrived once")
}

// A flush that fails leaves the delivery unacknowledged, so Pigeon
// redelivers it. Here the connection stays up (its status CONNECTED, so
// the route does not wait for it) while the server receives nothing: the
// publish is buffered as if sent, and only the flush's missing PONG tells
// that NATS did not take it. Once the connection is whole again the
// message arrives.
func TestOutCoreFailedFlushRedelivers(t *testing.T) {
	ns := runNATS(t, -1, "")
	e := newEngine(t)
	tc := connectNATS(t, ns.ClientURL(), 10*time.Millisecond)
	sub, err := tc.SubscribeSync("bridge.orders")
	require.NoError(t, err)
	require.NoError(t, tc.Flush())
	bh := &blackholeDialer{}
	nc, err := nats.Connect(ns.ClientURL(), nats.SetCustomDialer(bh), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	rb := start(t, Options{Dialer: transports[0].dialer(t, e), Credential: bridgeToken, NATS: nc, PublishTimeout: 200 * time.Millisecond, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
	}})

	bh.swallow(true)
	res, err := publisher(t, e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Retried >= 2 }, 30*time.Second, 5*time.Millisecond,
		"the flush failed, and the broker redelivers")
	require.Zero(t, routeStats(rb.b, "orders-out").Forwarded)
	require.Equal(t, nats.CONNECTED, nc.Status(), "the connection looked up throughout")

	bh.swallow(false)
	bh.cut() // the server saw part of a frame at most: a new connection
	m, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	require.Equal(t, res.Message.ID, m.Header.Get(HeaderMsgID))
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
}

// blackholeDialer dials NATS for a client whose writes it can swallow:
// while swallowing, the connection stays up but the server receives
// nothing the client sends.
type blackholeDialer struct {
	mu    sync.Mutex
	on    bool
	conns []net.Conn
}

func (d *blackholeDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return &blackholeConn{Conn: c, d: d}, nil
}

func (d *blackholeDialer) swallow(on bool) {
	d.mu.Lock()
	d.on = on
	d.mu.Unlock()
}

// cut closes every connection dialed so far.
func (d *blackholeDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

type blackholeConn struct {
	net.Conn
	d *blackholeDialer
}

func (c *blackholeConn) Write(p []byte) (int, error) {
	c.d.mu.Lock()
	on := c.d.on
	c.d.mu.Unlock()
	if on {
		return len(p), nil
	}
	return c.Conn.Write(p)
}
