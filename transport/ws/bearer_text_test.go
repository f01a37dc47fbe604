package ws_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"
)

// TestUpgradeBearerTokenIsTakenAsSent: as over HTTP, the upgrade's token
// loses only the spaces and tabs around a header value; a valid token
// followed or preceded by other white space is another token, refused.
func TestUpgradeBearerTokenIsTakenAsSent(t *testing.T) {
	v := newEnv(t, nil)
	for _, tc := range []struct {
		name, header string
		status       int
	}{
		{"as sent", "Bearer alice-token", http.StatusSwitchingProtocols},
		{"spaces and a tab around", "Bearer \t alice-token\t ", http.StatusSwitchingProtocols},
		{"a no-break space after", "Bearer alice-token\u00a0", http.StatusUnauthorized},
		{"an em space before", "Bearer \u2003alice-token", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Authorization": {tc.header}, "Origin": {v.hs.URL}}
			c, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{HTTPHeader: h})
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status != http.StatusSwitchingProtocols {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			_ = c.CloseNow()
		})
	}
}
