package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
)

// TestConsoleStreamsCappedPerPrincipal: a console stream is held open for
// as long as its reader likes, checks its token four times a second and
// encodes the engine's state every second. Without a cap, one auditor's
// token (a script, a leaked token) could hold every connection the server
// allows (Options.MaxConnections) as console streams, refusing every
// other client, as WebSocket connections cannot beyond their per-principal
// cap. A principal's streams beyond Options.MaxConsoleStreamsPerPrincipal
// are refused 429 RATE_LIMITED; another principal's are not, and a
// stream that ends gives its place back.
func TestConsoleStreamsCappedPerPrincipal(t *testing.T) {
	f := newFixture(t)
	limit := server.DefaultMaxConsoleStreamsPerPrincipal
	cancels := make([]context.CancelFunc, 0, limit)
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	open := func(token string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		res, events := f.openEvents(t, ctx, token)
		if res.StatusCode == http.StatusOK {
			require.Equal(t, "hello", (<-events).name)
		}
		return res, cancel
	}
	for i := range limit {
		res, cancel := open("auditor-token")
		cancels = append(cancels, cancel)
		require.Equal(t, http.StatusOK, res.StatusCode, "stream %d", i+1)
	}
	refusal := func() *http.Response {
		req, err := http.NewRequest(http.MethodGet, f.hs.URL+"/v1/console/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer auditor-token")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return res
	}
	res := refusal()
	if res.StatusCode == http.StatusOK {
		res.Body.Close()
		t.Fatalf("stream %d of one principal was served (200), beyond a cap of %d", limit+1, limit)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a stream beyond the principal's cap: %s", body)
	var e struct {
		Error struct {
			Code pigeon.Code `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	require.Equal(t, pigeon.CodeRateLimited, e.Error.Code)

	// Another auditor is not refused for the first one's streams.
	other, cancel := open("checkout-auditor-token")
	cancels = append(cancels, cancel)
	require.Equal(t, http.StatusOK, other.StatusCode)

	// A stream that ends gives its place back.
	cancels[0]()
	require.Eventually(t, func() bool {
		res := refusal()
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "a place given back")
}
