package mesgd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/leakcheck"
	"pigeon/server"
	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

// TestSelector: the route path is read escaped, split on '/' first and
// each segment unescaped on its own, so that a value may hold '/' (%2F);
// an escape of a character the selector syntax reserves stays its
// escape (that character, literally), any other is decoded.
func TestSelector(t *testing.T) {
	for _, tc := range []struct{ path, sel, canon string }{
		{"/mesgd", "/*", "/"},
		{"/mesgd/", "/*", "/"},
		{"/mesgd/kind=chat", "/kind=chat", "/kind=chat"},
		{"/mesgd/kind=chat/room=lobby", "/kind=chat/room=lobby", "/kind=chat/room=lobby"},
		{"/mesgd/kind=chat/", "/kind=chat", "/kind=chat"},
		{"/mesgd/room=a%2Fb", "/room=a%2Fb", "/room=a%2Fb"},
		{"/mesgd/room=a%2fb", "/room=a%2Fb", "/room=a%2Fb"},
		{"/mesgd/room=a%2Fb/kind=chat", "/room=a%2Fb/kind=chat", "/kind=chat/room=a%2Fb"},
		{"/mesgd/room=%2A", "/room=%2A", "/room=%2A"},
		{"/mesgd/room=50%25", "/room=50%25", "/room=50%25"},
		{"/mesgd/room=a%3Db", "/room=a%3Db", "/room=a=b"},
		{"/mesgd/a%2Eb=c", "/a%2Eb=c", "/a%2Eb=c"},
		{"/mesgd/a.b=c", "/a.b=c", "/a.b=c"},
		{"/mesgd/room=caf%C3%A9%20bar", "/room=café bar", "/room=café bar"},
		{"/mesgd/room=%7Elobby", "/room=~lobby", "/room=~lobby"},
		{"/mesgd/kind=chat/*/x=y", "/kind=chat/*/x=y", "/kind=chat"},
		{"/mesg%64/kind=chat", "/kind=chat", "/kind=chat"},
	} {
		sel, err := mesgd.Selector(tc.path)
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.sel, sel, tc.path)
		parsed, err := pigeon.ParseSelector(sel)
		require.NoError(t, err, tc.path)
		require.Equal(t, tc.canon, parsed.String(), tc.path)
	}
	for _, tc := range []struct{ path, parse string }{
		{"/mesgd/room=%", ""},        // a truncated escape
		{"/mesgd/room=%2", ""},       // a truncated escape
		{"/mesgd/room=%zz", ""},      // not hex
		{"/mesgd/room=%2G", ""},      // not hex
		{"/other/kind=chat", ""},     // not under /mesgd
		{"/mesgdx/kind=chat", ""},    // not under /mesgd
		{"mesgd/kind=chat", ""},      // not a path
		{"/mesgd/room=%FF", "UTF-8"}, // a selector ParseSelector refuses
		{"/mesgd/room=%00", "control"},
		{"/mesgd/room=a//b", "empty segment"},
		{"/mesgd//", ""},           // an empty segment, not every message
		{"/mesgd/kind=chat//", ""}, // an empty segment before the trailing '/'
		{"/mesgd///", ""},
	} {
		sel, err := mesgd.Selector(tc.path)
		if tc.parse != "" {
			require.NoError(t, err, tc.path)
			_, err = pigeon.ParseSelector(sel)
			require.ErrorContains(t, err, tc.parse, tc.path)
		}
		require.Error(t, err, tc.path)
		require.Equal(t, pigeon.CodeSelectorInvalid, pigeon.ErrorCode(err), tc.path)
	}
}

// startServer serves a broker with a chat subject (the field "password"
// is forbidden) and mesgd on it, on 127.0.0.1.
func startServer(t *testing.T) (string, *pigeon.Engine) {
	t.Helper()
	ctx := context.Background()
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob", "carol"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
			pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
			pigeon.StaticToken{Token: "carol-token", Principal: "carol"},
			pigeon.StaticToken{Token: "dave-token", Principal: "dave"},
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Data:   pigeon.DataPolicy{ForbiddenFields: []string{"password"}},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
	})
	require.NoError(t, err)
	s := server.New(e, &server.Options{Mesgd: &mesgd.Options{Subject: "chat"}})
	hs := httptest.NewServer(s)
	stopAtEnd(t, s, hs, e)
	return hs.URL, e
}

// stopAtEnd shuts down, when the test ends, the server s (mesgd's or the
// broker's) that hs serves, then hs, then the engine.
func stopAtEnd(t *testing.T, s interface{ Shutdown(context.Context) error }, hs *httptest.Server, e *pigeon.Engine) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		hs.Close()
		require.NoError(t, e.Shutdown(ctx))
	})
}

// dialMesgd connects as a mesgd program does: a plain WebSocket with the
// json subprotocol, a bearer header or the token as a subprotocol.
func dialMesgd(t *testing.T, base, path, token string, header bool) *websocket.Conn {
	t.Helper()
	o := &websocket.DialOptions{Subprotocols: []string{mesgd.Subprotocol}}
	if header {
		o.HTTPHeader = http.Header{"Authorization": {"Bearer " + token}}
	} else {
		o.Subprotocols = append(o.Subprotocols, ws.BearerSubprotocolPrefix+token)
	}
	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(base, "http")+path, o)
	require.NoError(t, err)
	require.Equal(t, mesgd.Subprotocol, c.Subprotocol())
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func readFrame(t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, websocket.MessageText, typ)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	return v
}

func send(t *testing.T, c *websocket.Conn, frame string) {
	t.Helper()
	require.NoError(t, c.Write(context.Background(), websocket.MessageText, []byte(frame)))
}

// A mesgd-format client and a Pigeon-protocol client chat by room.
func TestChatWithAPigeonClient(t *testing.T) {
	base, _ := startServer(t)
	ctx := context.Background()
	lobby := dialMesgd(t, base, "/mesgd/kind=chat/room=lobby", "alice-token", true)
	attic := dialMesgd(t, base, "/mesgd/kind=chat/room=attic", "carol-token", false)

	bob, err := ws.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/ws", "bob-token", []string{"chat"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	got := make(chan json.RawMessage, 16)
	sub, err := bob.Subscribe(ctx, "chat", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.Data
		return nil
	}, pigeon.WithSelector("/room=lobby"))
	require.NoError(t, err)
	defer sub.Unsubscribe(ctx)

	send(t, lobby, `{"kind":"chat","room":"lobby","from":"alice","text":"hello"}`)
	select {
	case d := <-got:
		require.JSONEq(t, `{"kind":"chat","room":"lobby","from":"alice","text":"hello"}`, string(d))
	case <-time.After(10 * time.Second):
		t.Fatal("bob got nothing")
	}
	require.Equal(t, "hello", readFrame(t, lobby)["text"], "alice's room hears her too")

	_, err = bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
		Data: json.RawMessage(`{"kind":"chat","room":"lobby","from":"bob","text":"hi alice"}`)})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"kind": "chat", "room": "lobby", "from": "bob", "text": "hi alice"}, readFrame(t, lobby))
	require.Contains(t, string(<-got), "hi alice", "bob hears himself, as any subscriber of the room")

	// A refused frame gets an error frame; the connection stays up.
	send(t, lobby, `{"kind":"chat","room":"lobby","password":"hunter2"}`)
	require.Equal(t, string(pigeon.CodeSensitiveFieldDenied), readFrame(t, lobby)["error"].(map[string]any)["code"])
	send(t, lobby, `not json`)
	require.Equal(t, string(pigeon.CodeBadRequest), readFrame(t, lobby)["error"].(map[string]any)["code"])

	send(t, attic, `{"kind":"chat","room":"attic","from":"carol","text":"anyone?"}`)
	require.Equal(t, "anyone?", readFrame(t, attic)["text"])
	send(t, lobby, `{"kind":"chat","room":"lobby","from":"alice","text":"still here"}`)
	require.Equal(t, "still here", readFrame(t, lobby)["text"], "the attic's message never reached the lobby")
	select {
	case d := <-got:
		require.JSONEq(t, `{"kind":"chat","room":"lobby","from":"alice","text":"still here"}`, string(d))
	case <-time.After(10 * time.Second):
		t.Fatal("bob missed the second message")
	}
}

func TestUpgradeRefusals(t *testing.T) {
	base, _ := startServer(t)
	url := "ws" + strings.TrimPrefix(base, "http")
	_, resp, err := websocket.Dial(context.Background(), url+"/mesgd/room=lobby", &websocket.DialOptions{Subprotocols: []string{mesgd.Subprotocol}})
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	_, resp, err = websocket.Dial(context.Background(), url+"/mesgd/=lobby", &websocket.DialOptions{
		Subprotocols: []string{mesgd.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	require.Error(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a selector that does not parse")
	_, resp, err = websocket.Dial(context.Background(), url+"/mesgd/room=lobby", &websocket.DialOptions{
		Subprotocols: []string{mesgd.Subprotocol, ws.BearerSubprotocolPrefix + "dave-token"}})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "dave may neither publish nor receive")
}

// A grant token (POST /v1/grants) is a credential like any other, here
// in the subprotocol a browser would send.
func TestGrantTokenCredential(t *testing.T) {
	base, e := startServer(t)
	ctx := context.Background()
	_, err := e.PutRole(ctx, pigeon.Role{Name: "chatter", Permissions: []pigeon.Permission{{Subject: "chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "erin", Roles: []string{"chatter"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, "erin", []string{"chatter"}, time.Hour)
	require.NoError(t, err)
	c := dialMesgd(t, base, "/mesgd/kind=chat/room=den", g.Token, false)
	send(t, c, `{"kind":"chat","room":"den","from":"erin","text":"granted"}`)
	require.Equal(t, "granted", readFrame(t, c)["text"])
}

// When the connection's contract ends, the connection is closed with 1008
// and the contract's code, for the client to reconnect.
func TestContractEndClosesTheConnection(t *testing.T) {
	base, e := startServer(t)
	ctx := context.Background()
	c := dialMesgd(t, base, "/mesgd/room=lobby", "alice-token", true)
	var id string
	require.Eventually(t, func() bool {
		recs, err := e.Audit(ctx, 0, 1000)
		require.NoError(t, err)
		for _, r := range recs {
			if r.Type == string(pigeon.EventSubscriptionStarted) && r.Principal == "alice" {
				id = r.ContractID
			}
		}
		return id != ""
	}, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, e.RevokeContract(ctx, &pigeon.Principal{ID: "alice"}, id))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err := c.Read(rctx)
	requireCloseError(t, err, websocket.StatusPolicyViolation, pigeon.CodeContractRevoked)
}

// TestCrossOriginUpgradeRefused: a page of another origin is refused 403
// before its credential is looked at (ws.CheckOrigin), as on /v1/ws: a
// made-up credential is not a refused one of the browser's address (a
// lockout of everyone behind it), and a good one negotiates no contract.
// Before, the credential came first: 401 for a made-up one, and a
// contract negotiated, then revoked, for a good one.
func TestCrossOriginUpgradeRefused(t *testing.T) {
	base, e := startServer(t)
	dial := func(origin, token string) int {
		t.Helper()
		h := http.Header{"Origin": {origin}}
		c, resp, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(base, "http")+mesgd.Prefix,
			&websocket.DialOptions{HTTPHeader: h, Subprotocols: []string{mesgd.Subprotocol, ws.BearerSubprotocolPrefix + token}})
		if err == nil {
			_ = c.Close(websocket.StatusNormalClosure, "")
			return resp.StatusCode
		}
		require.NotNil(t, resp, "%v", err)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, dial("https://evil.example", "guess"))
	require.Equal(t, http.StatusForbidden, dial("https://evil.example", "alice-token"))
	live, _, err := e.LiveContracts(context.Background(), 100)
	require.NoError(t, err)
	require.Empty(t, live, "no contract was negotiated for the foreign page")
	require.Equal(t, http.StatusSwitchingProtocols, dial(base, "alice-token"), "the server's own origin")
}

// TestEscapedPath: the path is read as the request carried it, %2F kept,
// also when it holds bytes that are not ASCII (url.URL.EscapedPath would
// re-escape the decoded path then, and %2F would become a '/').
func TestEscapedPath(t *testing.T) {
	for uri, want := range map[string]string{
		"/mesgd/room=a%2Fb":              "/mesgd/room=a%2Fb",
		"/mesgd/room=a%2Fb/x=\xc3\xa9":   "/mesgd/room=a%2Fb/x=\xc3\xa9",
		"/mesgd/room=lobby":              "/mesgd/room=lobby",
		"/mesgd/room=caf%C3%A9?region=x": "/mesgd/room=caf%C3%A9",
	} {
		u, err := url.ParseRequestURI(uri)
		require.NoError(t, err)
		require.Equal(t, want, mesgd.EscapedPath(u), uri)
	}
	sel, err := mesgd.Selector(mesgd.EscapedPath(&url.URL{Path: "/mesgd/room=a/b/x=é", RawPath: "/mesgd/room=a%2Fb/x=é"}))
	require.NoError(t, err)
	require.Equal(t, "/room=a%2Fb/x=é", sel)
}
