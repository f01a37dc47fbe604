package ws_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// upgradeFrom tries a WebSocket upgrade with token from local, an address
// of the loopback network (127.0.0.0/8 on Linux), and returns the answer's
// status and Retry-After.
func upgradeFrom(t *testing.T, v *env, local, token string) (int, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	tr := &http.Transport{DialContext: d.DialContext}
	defer tr.CloseIdleConnections()
	c, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: tr}, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}, Subprotocols: []string{ws.Subprotocol}})
	if err == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
		return resp.StatusCode, ""
	}
	if resp == nil && strings.Contains(err.Error(), "assign requested address") {
		t.Skipf("cannot send from %s here: %v", local, err)
	}
	require.NotNil(t, resp, "%v", err)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// authFailedRefs returns the refs of v's auth.failed records of code,
// checking that no token or guess is in the log.
func authFailedRefs(t *testing.T, v *env, code pigeon.Code) []string {
	t.Helper()
	return transporttest.AuthFailed(t, v.e, code, "alice-token", "guess")
}

// TestUpgradeAuthFailuresAuditedAndLockedOut: a refused upgrade writes an
// auth.failed record with the method and the client's IP, never the
// token, a run of them coalesced; after the engine's AuthFailureLimit the
// address's upgrades are answered 429 RATE_LIMITED with Retry-After before
// the token is checked, a valid one included; another address connects,
// and so does the locked one once the window has passed.
func TestUpgradeAuthFailuresAuditedAndLockedOut(t *testing.T) {
	clk := testclock.New(time.Now())
	v := newEnv(t, nil, func(o *pigeon.Options) { o.Now, o.AuthFailureLimit, o.AuthFailureWindow = clk.Now, 4, time.Minute })
	for i := range 4 {
		_, err := ws.Dial(context.Background(), v.url, "guess-"+strconv.Itoa(i), []string{"chat.messages"})
		var pe *pigeon.Error
		require.ErrorAs(t, err, &pe)
		require.Equal(t, pigeon.CodeUnauthenticated, pe.Code)
	}
	clk.Advance(2 * time.Second)
	require.Equal(t, []string{"auth:token from 127.0.0.1", "coalesced:3 auth:token from 127.0.0.1"}, authFailedRefs(t, v, pigeon.CodeUnauthenticated))

	status, retry := upgradeFrom(t, v, "127.0.0.1", "alice-token")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Equal(t, "58", retry)
	_, err := ws.Dial(context.Background(), v.url, "alice-token", []string{"chat.messages"})
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, pigeon.CodeRateLimited, pe.Code)
	status, _ = upgradeFrom(t, v, "127.0.0.2", "alice-token")
	require.Equal(t, http.StatusSwitchingProtocols, status, "another address is unaffected")

	clk.Advance(58 * time.Second)
	status, _ = upgradeFrom(t, v, "127.0.0.1", "alice-token")
	require.Equal(t, http.StatusSwitchingProtocols, status, "the window has passed")
	require.Equal(t, []string{"auth:token from 127.0.0.1", "coalesced:1 auth:token from 127.0.0.1"}, authFailedRefs(t, v, pigeon.CodeRateLimited))
	require.Equal(t, int64(6), v.srv.Stats().Refused, "four guesses and two lockouts")
}
