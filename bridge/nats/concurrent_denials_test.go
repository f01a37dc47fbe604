package natsbridge

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Two core NATS Out routes denied at once: both publish before either
// flushes, so the server reports both violations before either flush's
// answer. nats.go keeps only the last error, and the route whose violation
// came first read the other's: it counted its message Forwarded and the
// broker was told NATS took it. The connection's error handler, which the
// bridge now wraps, hears both; the caller's handler is still called, and
// given back when Run returns.
func TestTwoRoutesDeniedAtOnce(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Users: []*server.User{
		{Username: "bridge", Password: "pw", Permissions: &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{"bridge.denied.>"}}}},
	}})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	var callerHeard atomic.Int64
	caller := func(*nats.Conn, *nats.Subscription, error) { callerHeard.Add(1) }
	nc, err := nats.Connect(s.ClientURL(), append(ConnectOptions(), nats.UserInfo("bridge", "pw"), nats.ErrorHandler(caller))...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	e := newEngine(t)
	b, err := New(Options{Dialer: transports[0].dialer(t, e), Credential: bridgeToken, NATS: nc, Routes: []Route{
		{Name: "denied-a", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.denied.a"},
		{Name: "denied-b", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.denied.b"},
	}})
	require.NoError(t, err)
	// The first publish of each route waits, before its flush, for the
	// other's: both violations come before both flushes' answers.
	var rendezvous sync.WaitGroup
	rendezvous.Add(2)
	var first sync.Map
	b.betweenCore = func(route string) {
		if _, again := first.LoadOrStore(route, true); !again {
			rendezvous.Done()
			rendezvous.Wait()
		}
	}
	rb := startBridge(t, b)
	_, err = publisher(t, e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		a, b := routeStats(rb.b, "denied-a"), routeStats(rb.b, "denied-b")
		return (a.Retried >= 2 || a.Forwarded > 0) && (b.Retried >= 2 || b.Forwarded > 0)
	}, 30*time.Second, 5*time.Millisecond)
	require.Zero(t, routeStats(rb.b, "denied-a").Forwarded, "a publish the server dropped counted as carried")
	require.Zero(t, routeStats(rb.b, "denied-b").Forwarded, "a publish the server dropped counted as carried")
	require.GreaterOrEqual(t, callerHeard.Load(), int64(2), "the caller's handler hears the violations too")

	rb.stop(t)
	require.NoError(t, rb.wait(t, 20*time.Second))
	before := callerHeard.Load()
	require.NoError(t, nc.Publish("bridge.denied.c", nil))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return callerHeard.Load() > before }, 10*time.Second, 5*time.Millisecond,
		"the caller's handler is given back when Run returns")
}

// deniedSubject reads the subject of a publish violation as the server
// quotes it, and nothing else.
func TestDeniedSubject(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
		ok   bool
	}{
		{errors.Join(nats.ErrPermissionViolation, errors.New(`Permissions Violation for Publish to "a.b"`)), `"a.b"`, true},
		{errors.Join(nats.ErrPermissionViolation, errors.New(`Permissions Violation for Publish to "a\"b"`)), `"a\"b"`, true},
		{errors.Join(nats.ErrPermissionViolation, errors.New(`Permissions Violation for Subscription to "a.b"`)), "", false},
		{errors.New(`Permissions Violation for Publish to "a.b"`), "", false},
		{nats.ErrSlowConsumer, "", false},
		{nil, "", false},
	} {
		got, ok := deniedSubject(tc.err)
		require.Equal(t, tc.ok, ok, "%v", tc.err)
		require.Equal(t, tc.want, got, "%v", tc.err)
	}
}
