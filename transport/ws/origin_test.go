package ws_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/ws"
)

// upgradeWithOrigin tries an upgrade as a browser page of origin does,
// offering token as a bearer subprotocol, and returns the answer's status.
func upgradeWithOrigin(t *testing.T, v *env, origin, token string) int {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
		HTTPHeader: h, Subprotocols: []string{ws.Subprotocol, ws.BearerSubprotocolPrefix + token}})
	if err == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
		return resp.StatusCode
	}
	require.NotNil(t, resp, "%v", err)
	return resp.StatusCode
}

// TestCrossOriginUpgradeRefusedBeforeCredential: a page of another site
// has every browser that opens it try upgrades with made-up bearer
// subprotocols. They are refused 403 before the credential is looked at:
// no auth.failed record, no count toward the browser's address, which
// still connects (before, each was a refused credential of that address,
// and the fifth locked it out: 429 for a minute, for every client behind
// it). An allowed origin's credential is checked as any.
func TestCrossOriginUpgradeRefusedBeforeCredential(t *testing.T) {
	clk := testclock.New(time.Now())
	v := newEnv(t, &ws.Options{OriginPatterns: []string{"app.example"}},
		func(o *pigeon.Options) { o.Now, o.AuthFailureLimit, o.AuthFailureWindow = clk.Now, 4, time.Minute })
	for i := range 8 {
		require.Equal(t, http.StatusForbidden, upgradeWithOrigin(t, v, "https://evil.example", "guess-"+strconv.Itoa(i)), "upgrade %d", i)
	}
	require.Equal(t, http.StatusForbidden, upgradeWithOrigin(t, v, "null", "guess-x"), "a sandboxed page has no origin to allow")
	require.Equal(t, http.StatusForbidden, upgradeWithOrigin(t, v, "https://evil.example", "alice-token"), "nor does a valid credential let it in")
	clk.Advance(2 * time.Second)
	require.Empty(t, authFailedRefs(t, v, pigeon.CodeUnauthenticated), "nothing was authenticated")
	require.Empty(t, authFailedRefs(t, v, pigeon.CodeRateLimited))

	require.Equal(t, http.StatusSwitchingProtocols, upgradeWithOrigin(t, v, "", "alice-token"), "the browser's address is not locked out")
	require.Equal(t, http.StatusSwitchingProtocols, upgradeWithOrigin(t, v, "https://APP.example", "alice-token"))
	require.Equal(t, http.StatusUnauthorized, upgradeWithOrigin(t, v, "https://app.example", "guess-y"), "an allowed page's credential is checked")
	require.Equal(t, http.StatusSwitchingProtocols, upgradeWithOrigin(t, v, "http://"+v.hs.Listener.Addr().String(), "alice-token"), "the server's own origin")
}
