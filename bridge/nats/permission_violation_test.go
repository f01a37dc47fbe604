package natsbridge

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A core NATS server that denies the bridge's user publish on an Out
// route's subject drops the message and reports the violation
// asynchronously; the flush succeeds. The route counted the message
// Forwarded and the broker was told it was delivered. It now reads the
// connection's error after the flush: the publish fails, and the broker
// redelivers it within the subject's retry policy.
func TestCorePermissionViolationIsNotForwarded(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Users: []*server.User{
		{Username: "bridge", Password: "pw", Permissions: &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{"bridge.denied"}}}},
		{Username: "test", Password: "pw"},
	}})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	nc, err := nats.Connect(s.ClientURL(), append(ConnectOptions(), nats.UserInfo("bridge", "pw"))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	tc, err := nats.Connect(s.ClientURL(), nats.UserInfo("test", "pw"))
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	denied, err := tc.SubscribeSync("bridge.denied")
	require.NoError(t, err)
	allowed, err := tc.SubscribeSync("bridge.allowed")
	require.NoError(t, err)
	require.NoError(t, tc.Flush())

	e := newEngine(t)
	rb := start(t, Options{Dialer: transports[0].dialer(t, e), Credential: bridgeToken, NATS: nc, Routes: []Route{
		{Name: "denied", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.denied"},
		{Name: "allowed", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.allowed"},
	}})
	_, err = publisher(t, e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	_, err = allowed.NextMsg(30 * time.Second)
	require.NoError(t, err, "the allowed route carries it")
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "denied")
		return s.Retried >= 3 || s.Forwarded > 0
	}, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, routeStats(rb.b, "denied").Forwarded, "a publish the server dropped counted as carried")
	require.EqualValues(t, 1, routeStats(rb.b, "allowed").Forwarded)
	_, err = denied.NextMsg(50 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout)
}
