package mesgd_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/mesgd"
)

// TestFrameInputRefusedTyped: every frame that is not one JSON object
// the gates can judge unambiguously gets an error frame with its code,
// and none of them is published: the connection selects every message
// (/mesgd), so a refused frame published all the same would come back
// to it before the frame sent after them. A frame of exactly MaxFrame
// bytes is published, and what comes back is what was sent; one a byte
// longer closes the connection with 1009.
func TestFrameInputRefusedTyped(t *testing.T) {
	base, _ := startServer(t)
	c := dialMesgd(t, base, "/mesgd", "alice-token", true)
	c.SetReadLimit(1 << 20)
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	for _, tc := range []struct {
		name string
		typ  websocket.MessageType
		in   string
		code pigeon.Code
	}{
		{"binary", websocket.MessageBinary, `{"room":"lobby"}`, pigeon.CodeBadRequest},
		{"empty", websocket.MessageText, ``, pigeon.CodeBadRequest},
		{"array", websocket.MessageText, `[{"room":"lobby"}]`, pigeon.CodeBadRequest},
		{"string", websocket.MessageText, `"room"`, pigeon.CodeBadRequest},
		{"trailing text", websocket.MessageText, `{"room":"lobby"} {}`, pigeon.CodeBadRequest},
		{"invalid UTF-8 in a string", websocket.MessageText, "{\"room\":\"lob\xffby\"}", pigeon.CodeInvalidUTF8},
		{"invalid UTF-8 in a name", websocket.MessageText, "{\"ro\xc3om\":\"lobby\"}", pigeon.CodeInvalidUTF8},
		{"lone surrogate escape", websocket.MessageText, `{"room":"\ud800"}`, pigeon.CodeInvalidUTF8},
		{"duplicate key", websocket.MessageText, `{"room":"attic","room":"lobby"}`, pigeon.CodeDuplicateKey},
		{"duplicate key escaped", websocket.MessageText, `{"room":"attic","r\u006fom":"lobby"}`, pigeon.CodeDuplicateKey},
		{"nested past the limit", websocket.MessageText, deep(pigeon.MaxJSONDepth + 1), pigeon.CodeEnvelopeInvalid},
		{"nested far past the limit", websocket.MessageText, deep(20000), pigeon.CodeBadRequest},
		{"number beyond float64", websocket.MessageText, `{"n":1e400}`, pigeon.CodeEnvelopeInvalid},
		{"forbidden field escaped", websocket.MessageText, `{"pass\u0077ord":"hunter2"}`, pigeon.CodeSensitiveFieldDenied},
	} {
		require.NoError(t, c.Write(context.Background(), tc.typ, []byte(tc.in)), tc.name)
		got := readFrame(t, c)
		require.Contains(t, got, "error", "%s: %v", tc.name, got)
		require.Equal(t, string(tc.code), got["error"].(map[string]any)["code"], tc.name)
	}
	exact := `{"pad":"` + strings.Repeat("x", 64<<10-len(`{"pad":""}`)) + `"}`
	require.Len(t, exact, 64<<10)
	send(t, c, exact)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := c.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, exact, string(b), "the first frame back is the one accepted, as sent")
	send(t, c, exact[:len(exact)-1]+` "}`) // a byte more
	_, _, err = c.Read(ctx)
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "%v", err)
}

// TestReceiveScopeBoundsTheRoutePath: a route path that selects every
// message (/mesgd) sees only what the contract's receive scope allows (a
// role permission with a selector), and a frame outside the publish scope
// is refused with an error frame.
func TestReceiveScopeBoundsTheRoutePath(t *testing.T) {
	base, e := startServer(t)
	ctx := context.Background()
	_, err := e.PutRole(ctx, pigeon.Role{Name: "lobbyist", Permissions: []pigeon.Permission{
		{Subject: "chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}, Selector: "/room=lobby"},
	}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "erin", Roles: []string{"lobbyist"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, "erin", []string{"lobbyist"}, time.Hour)
	require.NoError(t, err)
	c := dialMesgd(t, base, "/mesgd", g.Token, false)

	send(t, c, `{"room":"attic","n":0}`)
	require.Equal(t, string(pigeon.CodePolicyDenied), readFrame(t, c)["error"].(map[string]any)["code"], "outside the publish scope")
	bob, err := e.Connect(ctx, "bob-token", []string{"chat"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	for n, room := range []string{"attic", "lobby"} {
		_, err = bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
			Data: json.RawMessage(`{"room":"` + room + `","n":` + string(rune('1'+n)) + `}`)})
		require.NoError(t, err)
	}
	require.Equal(t, map[string]any{"room": "lobby", "n": float64(2)}, readFrame(t, c), "the attic's message is outside the receive scope")
}

// TestTokenInTheQueryIsNotACredential: a token in the URL (which proxies
// and access logs keep) is not read: the upgrade is 401, and the
// endpoint's log never holds it.
func TestTokenInTheQueryIsNotACredential(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	f := newClockFixture(t, func(o *mesgd.Options) {
		o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	u := "ws" + strings.TrimPrefix(f.base, "http") + "/mesgd/room=lobby?access_token=alice-token&token=alice-token&bearer=alice-token"
	_, resp, err := websocket.Dial(context.Background(), u, &websocket.DialOptions{Subprotocols: []string{mesgd.Subprotocol}})
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	c := dialMesgd(t, f.base, "/mesgd/room=lobby?note=alice-token", "alice-token", true)
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	mu.Lock()
	defer mu.Unlock()
	require.NotContains(t, logs.String(), "alice-token")
	require.Contains(t, logs.String(), "mesgd connected")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
