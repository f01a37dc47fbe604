package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

// withdrawable is an authenticator of static tokens that may be withdrawn,
// as a reloaded token file would be.
type withdrawable struct {
	mu     sync.Mutex
	tokens map[string]string // token → principal
}

func (a *withdrawable) Authenticate(_ context.Context, token string) (*pigeon.Principal, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id, ok := a.tokens[token]; ok {
		return &pigeon.Principal{ID: id}, nil
	}
	return nil, pigeon.NewError(pigeon.CodeUnauthenticated, "unknown or missing credential")
}

func (a *withdrawable) withdraw(token string) {
	a.mu.Lock()
	delete(a.tokens, token)
	a.mu.Unlock()
}

// TestReauthenticateCoversBothEndpoints: one call of the server's
// Reauthenticate checks the connections of /v1/ws and of /mesgd: those
// whose credential was withdrawn are closed 1008 UNAUTHENTICATED, their
// contracts revoked; the others stay.
func TestReauthenticateCoversBothEndpoints(t *testing.T) {
	ctx := context.Background()
	auth := &withdrawable{tokens: map[string]string{"alice-token": "alice", "bob-token": "bob"}}
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: auth, Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
		Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
	}}}})
	require.NoError(t, err)
	s := server.New(e, &server.Options{Mesgd: &mesgd.Options{Subject: "chat"}})
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(sctx))
		hs.Close()
		require.NoError(t, e.Shutdown(sctx))
	})
	base := "ws" + strings.TrimPrefix(hs.URL, "http")
	session := func(token string) *ws.Session {
		sess, err := ws.Dial(ctx, base+"/v1/ws", token, []string{"chat"})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sess.Close(context.Background()) })
		return sess
	}
	raw := func(token string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, base+"/mesgd/room=lobby", &websocket.DialOptions{
			Subprotocols: []string{mesgd.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.CloseNow() })
		return c
	}
	aliceWS, bobWS := session("alice-token"), session("bob-token")
	aliceMesgd, bobMesgd := raw("alice-token"), raw("bob-token")
	live := func(principal string) int {
		l, _, err := e.LiveContracts(ctx, 1000)
		require.NoError(t, err)
		n := 0
		for _, k := range l {
			if k.Principal == principal {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return live("alice") == 2 && live("bob") == 2 }, 30*time.Second, 5*time.Millisecond)
	// A /mesgd contract is negotiated before the upgrade and the connection
	// tracked after it: a live contract does not yet say that Reauthenticate
	// sees the connection (one it misses checks itself, uncounted). A frame
	// one client sends that the other receives does: both read loops and
	// subscriptions start after tracking. The subscription being at most
	// once, a frame sent before it started is lost: send until one arrives.
	aliceFrames, bobFrames := frames(ctx, aliceMesgd), frames(ctx, bobMesgd)
	aliceFrames.handshake(t, aliceMesgd, bobFrames, "alice ready")
	bobFrames.handshake(t, bobMesgd, aliceFrames, "bob ready")
	auth.withdraw("alice-token")
	ended, err := s.Reauthenticate(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, ended, "alice's two connections")
	require.Zero(t, live("alice"), "alice's contracts are revoked")
	select {
	case <-aliceWS.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("alice's /v1/ws connection stayed up")
	}
	require.Contains(t, aliceWS.Err().Error(), string(pigeon.CodeUnauthenticated))
	err = aliceFrames.closed(t)
	require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "%v", err)
	var ce websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, string(pigeon.CodeUnauthenticated), ce.Reason)

	require.Equal(t, 2, live("bob"), "bob's connections are left alone")
	_, err = bobWS.Renew(ctx)
	require.NoError(t, err)
	require.NoError(t, bobMesgd.Write(ctx, websocket.MessageText, []byte(`{"room":"lobby","text":"still here"}`)))
	bobFrames.await(t, "still here", 10*time.Second)
}

// connFrames is what a background reader of a WebSocket connection read:
// its text frames, then the error that ended it.
type connFrames struct {
	texts chan string
	err   chan error
}

func frames(ctx context.Context, c *websocket.Conn) *connFrames {
	f := &connFrames{texts: make(chan string, 1024), err: make(chan error, 1)}
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				f.err <- err
				return
			}
			f.texts <- string(b)
		}
	}()
	return f
}

// await reports whether a frame holding text arrives within d, reading past
// others.
func (f *connFrames) await(t *testing.T, text string, d time.Duration) bool {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case s := <-f.texts:
			if strings.Contains(s, text) {
				return true
			}
		case err := <-f.err:
			require.NoError(t, err)
		case <-timeout:
			return false
		}
	}
}

// handshake sends text on from (whose frames f reads) until to receives it.
func (f *connFrames) handshake(t *testing.T, from *websocket.Conn, to *connFrames, text string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		require.NoError(t, from.Write(context.Background(), websocket.MessageText, []byte(`{"room":"lobby","text":"`+text+`"}`)))
		if to.await(t, text, 50*time.Millisecond) {
			return
		}
	}
	t.Fatalf("%q never arrived", text)
}

// closed returns the error that ended the connection, reading past frames
// on their way before it.
func (f *connFrames) closed(t *testing.T) error {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case <-f.texts:
		case err := <-f.err:
			return err
		case <-timeout:
			t.Fatal("the connection stayed up")
		}
	}
}
