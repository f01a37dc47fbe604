package mesgd_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/mesgd"
)

// closingStallListener is stallListener whose connections' held-up
// writes fail once the connection is closed, as a write blocked on a
// full socket does.
type closingStallListener struct {
	net.Listener
	st *stall
}

func (l closingStallListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &closingStallConn{Conn: conn, st: l.st, closed: make(chan struct{})}, nil
}

type closingStallConn struct {
	net.Conn
	st     *stall
	closed chan struct{}
	once   sync.Once
}

func (c *closingStallConn) Write(b []byte) (int, error) {
	if c.st.on.Load() {
		c.st.first.Do(func() { close(c.st.blocked) })
		select {
		case <-c.st.release:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
	return c.Conn.Write(b)
}

func (c *closingStallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// shutdownFixture is a chat broker (chatPolicy) with a mesgd endpoint
// whose writes st holds up once on; gate, when set, runs as a publish
// gate. It returns the endpoint's server, its base URL and the engine;
// the test shuts the endpoint down itself.
func shutdownFixture(t *testing.T, st *stall, gate pigeon.Gate) (*mesgd.Server, string, *pigeon.Engine) {
	t.Helper()
	ctx := context.Background()
	o := &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
			pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{chatPolicy("v1")}},
	}
	if gate != nil {
		o.Gates = []pigeon.Gate{gate}
	}
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "chat", PingInterval: -1})
	t.Cleanup(st.letGo)
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener = closingStallListener{Listener: hs.Listener, st: st}
	hs.Start()
	stopAtEnd(t, srv, hs, e)
	return srv, hs.URL, e
}

// requireNoLiveContract requires every contract of principal revoked.
func requireNoLiveContract(t *testing.T, e *pigeon.Engine, principal string) {
	t.Helper()
	live, _, err := e.LiveContracts(context.Background(), 10)
	require.NoError(t, err)
	for _, k := range live {
		require.NotEqual(t, principal, k.Principal, "Shutdown returned with %s's contract live", principal)
	}
}

// TestShutdownDuringABlockedWrite: Shutdown while a delivery's write is
// held up by a client that does not read returns, the connection's
// contract revoked: the close it sends cannot get past the held-up
// write, and the connection is then dropped, which fails the write.
func TestShutdownDuringABlockedWrite(t *testing.T) {
	st := newStall()
	srv, base, e := shutdownFixture(t, st, nil)
	ctx := context.Background()
	c := dialMesgd(t, base, "/mesgd/room=lobby", "alice-token", true)
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	st.on.Store(true)
	bob, err := e.Connect(ctx, "bob-token", []string{"chat"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	_, err = bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
		Data: json.RawMessage(`{"room":"lobby","n":1}`)})
	require.NoError(t, err)
	wait(t, st.blocked, "the delivery's write was never held up")

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(sctx))
	requireNoLiveContract(t, e, "alice")
}

// TestShutdownDuringAPublish: a frame whose publish is under way when
// Shutdown closes the connection is published all the same (it was read,
// and nothing it was judged on changed), and Shutdown returns once it
// is, the contract revoked after it.
func TestShutdownDuringAPublish(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	gate := pigeon.GateFunc("hold", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		if m, ok := a.Data.(map[string]any); ok && m["hold"] == true {
			once.Do(func() { close(entered) })
			<-release
		}
		return pigeon.Allow()
	})
	st := newStall()
	srv, base, e := shutdownFixture(t, st, gate)
	ctx := context.Background()
	c := dialMesgd(t, base, "/mesgd/room=nowhere", "alice-token", true)
	send(t, c, `{"room":"lobby","hold":true}`)
	wait(t, entered, "the frame never reached the gate")

	done := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		done <- srv.Shutdown(sctx)
	}()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err := c.Read(rctx)
	require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	close(release)
	require.NoError(t, <-done)
	requireNoLiveContract(t, e, "alice")
	recs, err := e.Audit(ctx, 0, 1000)
	require.NoError(t, err)
	accepted := 0
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) && r.Principal == "alice" {
			accepted++
		}
	}
	require.Equal(t, 1, accepted, "the frame read before the shutdown was published")
}
