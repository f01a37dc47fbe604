package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// A DNS rebinding page (a page of the attacker's name, whose address is
// then made the server's) is of the server's origin in the browser's
// eyes: no Origin, Sec-Fetch-Site same-origin, any header its script
// sets, the demo's public admin-token among them. With AllowedHosts, a
// request whose Host is another name is refused before its credential is
// looked at; IP literals and the names allowed are served. Before, the
// quickstart's broker on 127.0.0.1 served such a page as its own console.
func TestRequestsForOtherHostNamesRefused(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	_, hs := serve(t, e, &server.Options{AllowedHosts: server.LoopbackHosts})
	for _, tc := range []struct {
		host   string
		served bool
	}{
		{"localhost:8787", true},
		{"LocalHost", true},
		{"localhost.", true},
		{"console.localhost:8787", true},
		{"127.0.0.1:8787", true},
		{"[::1]:8787", true},
		{"10.1.2.3", true},
		{"rebind.evil.example:8787", false},
		{"localhost.evil.example", false},
		{"evillocalhost", false},
		{"evil.example", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			for _, upgrade := range []bool{false, true} {
				path := "/v1/accounts"
				if upgrade {
					path = "/v1/ws"
				}
				req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
				require.NoError(t, err)
				req.Host = tc.host
				req.Header.Set("Authorization", "Bearer admin-token")
				req.Header.Set("Sec-Fetch-Site", "same-origin")
				if upgrade {
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "websocket")
					req.Header.Set("Sec-WebSocket-Version", "13")
					req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
					req.Header.Set("Sec-WebSocket-Protocol", "pigeon.v1")
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				if tc.served {
					resp.Body.Close() // an upgrade's body is the connection
					require.NotEqual(t, http.StatusForbidden, resp.StatusCode)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", body)
				var eb struct {
					Error struct{ Code pigeon.Code } `json:"error"`
				}
				require.NoError(t, json.Unmarshal(body, &eb), "%s", body)
				require.Equal(t, pigeon.CodeForbidden, eb.Error.Code)
			}
		})
	}
}

// Without AllowedHosts, every name is served, as before: the library
// decides nothing for an embedder.
func TestAnyHostNameWithoutAllowedHosts(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog()})
	require.NoError(t, err)
	_, hs := serve(t, e, &server.Options{})
	req, err := http.NewRequest(http.MethodGet, hs.URL+"/v1/accounts", nil)
	require.NoError(t, err)
	req.Host = "broker.example.com"
	req.Header.Set("Authorization", "Bearer admin-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
