package cli

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// demoServer serves an engine of the demo catalog and tokens (region uk)
// over HTTP until the test ends, as `pigeon serve` would; change, when
// not nil, changes its options first.
func demoServer(t *testing.T, change func(*pigeon.Options)) (*pigeon.Engine, *httptest.Server) {
	t.Helper()
	o := &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"}
	if change != nil {
		change(o)
	}
	e, err := pigeon.New(t.Context(), o)
	require.NoError(t, err)
	s := server.New(e, nil)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		require.NoError(t, s.Shutdown(context.Background()))
		require.NoError(t, e.Shutdown(context.Background()))
	})
	return e, hs
}

// demoCaller is the caller of a demo token with a contract for subjects,
// in region uk.
func demoCaller(t *testing.T, e *pigeon.Engine, token string, subjects ...string) pigeon.Caller {
	t.Helper()
	p, err := e.Authenticate(t.Context(), token)
	require.NoError(t, err)
	k, err := e.Negotiate(t.Context(), p, "uk", subjects, 0)
	require.NoError(t, err)
	return pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}
}
