package natsbridge

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// nats.go keeps what is published while its connection is being
// reestablished and sends it once the connection is back. For an Out
// route that publish had failed already (the broker delivers the message
// again), and what was kept left later, whether or not the contract still
// allowed it by then. The connections the bridge opens (Options.URL, the
// pigeon-bridge command) keep nothing: a publish while NATS is away fails
// at once, and nothing is sent when it is back.
func TestConnectOptionsKeepNothingWhileReconnecting(t *testing.T) {
	first := runNATS(t, -1, "")
	port := first.Addr().(*net.TCPAddr).Port
	ns := first
	nc, err := nats.Connect(ns.ClientURL(), append(ConnectOptions(), nats.ReconnectWait(10*time.Millisecond))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	watch, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(watch.Close)

	ns.Shutdown()
	ns.WaitForShutdown()
	require.Eventually(t, nc.IsReconnecting, 10*time.Second, time.Millisecond)
	require.ErrorIs(t, nc.Publish("out.orders", []byte("late")), nats.ErrReconnectBufExceeded)

	ns = runNATS(t, port, "")
	require.Eventually(t, func() bool { return nc.IsConnected() && watch.IsConnected() }, 10*time.Second, time.Millisecond)
	sub, err := watch.SubscribeSync("out.orders")
	require.NoError(t, err)
	require.NoError(t, watch.Flush())
	require.NoError(t, nc.Publish("out.orders", []byte("now")))
	require.NoError(t, nc.Flush())
	m, err := sub.NextMsg(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "now", string(m.Data), "what was published while away was kept and sent")
}

// A caller's connection with the reconnect buffer gets a warning at Run;
// one made with ConnectOptions does not.
func TestRunWarnsOfAReconnectBuffer(t *testing.T) {
	v := newEnv(t) // v.nc: nats.go's default buffer
	own, err := nats.Connect(v.ns.ClientURL(), ConnectOptions()...)
	require.NoError(t, err)
	t.Cleanup(own.Close)
	for _, tt := range []struct {
		name string
		nc   *nats.Conn
		warn bool
	}{{"default buffer", v.nc, true}, {"ConnectOptions", own, false}} {
		t.Run(tt.name, func(t *testing.T) {
			warned := &recordCounter{msg: warnReconnectBuffer, seen: make(chan struct{}, 1)}
			b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: tt.nc, Logger: slog.New(warned), Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders"},
			}})
			require.NoError(t, err)
			startBridge(t, b)
			require.Equal(t, tt.warn, len(warned.seen) == 1)
		})
	}
}
