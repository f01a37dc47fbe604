package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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
	f := newRotation(t)
	e := f.e
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
	f.use(t, filepath.Join(f.dirB, "ca.pem"))
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 1, calls, "checked once the CAs are reloaded")
	require.Contains(t, logs.String(), "client CAs reloaded")
	require.Contains(t, logs.String(), "open connections checked against the reloaded client CAs")
	require.Contains(t, logs.String(), "ended=3")

	require.NoError(t, os.WriteFile(f.caFile, []byte("not a certificate"), 0o600))
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 1, calls, "the CAs in use did not change: nothing to check")

	hangup(ctx, e.cert, nil, reauth, logs.Logger())
	require.Equal(t, 1, calls, "no client CAs: nothing to check")

	f.use(t, filepath.Join(f.dirA, "ca.pem"))
	fail = errors.New("identity provider unreachable")
	logs = &testlog.Buffer{}
	hangup(ctx, e.cert, e.reloadCAs, reauth, logs.Logger())
	require.Equal(t, 2, calls)
	require.Contains(t, logs.String(), "some open connections could not be checked")
	require.Contains(t, logs.String(), "identity provider unreachable")
}
