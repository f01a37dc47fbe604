package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/demo"
	"pigeon/internal/testlog"
)

// TestHangupChecksOpenConnections: on SIGHUP (hangup), once the client CAs
// are reloaded, the open connections are checked again against them
// (server.Server.Reauthenticate), so that a connection opened with a
// certificate of a CA taken out ends now rather than when it closes; when
// the CAs fail to load (the previous ones stay) or there are none to
// reload, nothing is checked. A check that fails is logged. Before, a
// reload left every open WebSocket connection its session.
func TestHangupChecksOpenConnections(t *testing.T) {
	dirA, dirB, dir := t.TempDir(), t.TempDir(), t.TempDir()
	writeTestPKI(t, dirA, map[string]string{"orders": demo.Orders})
	writeTestPKI(t, dirB, map[string]string{"orders": demo.Orders})
	caFile := filepath.Join(dir, "client-ca.pem")
	copyFile := func(from string) {
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(caFile, b, 0o600))
	}
	copyFile(filepath.Join(dirA, "ca.pem"))
	e, err := buildEdge(serveConfig{tlsCert: filepath.Join(dirA, "server.pem"), tlsKey: filepath.Join(dirA, "server-key.pem"),
		clientCA: []string{caFile}, trustDomains: []string{"merchant-prod"}, mtlsMode: "required"}, demo.Tokens(), nil)
	require.NoError(t, err)
	calls := 0
	var fail error
	reauth := func(ctx context.Context) (int, error) {
		calls++
		_, ok := ctx.Deadline()
		require.True(t, ok, "the check is bounded")
		return 3, fail
	}
	ctx := context.Background()

	logs := &testlog.Buffer{}
	copyFile(filepath.Join(dirB, "ca.pem"))
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 1, calls, "checked once the CAs are reloaded")
	require.Contains(t, logs.String(), "client CAs reloaded")
	require.Contains(t, logs.String(), "open connections checked against the reloaded client CAs")
	require.Contains(t, logs.String(), "ended=3")

	require.NoError(t, os.WriteFile(caFile, []byte("not a certificate"), 0o600))
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 1, calls, "the CAs in use did not change: nothing to check")

	hangup(ctx, e.cert, nil, reauth, logs.Logger())
	require.Equal(t, 1, calls, "no client CAs: nothing to check")

	copyFile(filepath.Join(dirA, "ca.pem"))
	fail = errors.New("identity provider unreachable")
	logs = &testlog.Buffer{}
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 2, calls)
	require.Contains(t, logs.String(), "some open connections could not be checked")
	require.Contains(t, logs.String(), "identity provider unreachable")
}
