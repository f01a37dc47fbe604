package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testlog"
	"pigeon/server"
	"pigeon/store/memory"
	"pigeon/store/storetest"
)

// A store that finds damaged data names the file and the offset; the
// answer to the client keeps the code (STORE_CORRUPT) but not where the
// server keeps its data: that goes to the server's log, for the operator.
func TestStoreDamageDoesNotNameServerPaths(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Store:         storetest.Damaged{Store: memory.New(nil)},
	})
	require.NoError(t, err)
	var logs testlog.Buffer
	s, hs := serve(t, e, &server.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	f := &fixture{e: e, s: s, hs: hs}
	id := f.contract(t, "checkout-token", "payments.authorize")

	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, demo.Payment("o-damaged")), "x-pigeon-contract", id)
	require.Equal(t, pigeon.CodeStoreCorrupt, r.code(t), "%s", r.body)
	require.NotContains(t, string(r.body), "/var/lib/pigeon")
	require.NotContains(t, string(r.body), "0000000001.log")
	require.Contains(t, logs.String(), storetest.DamagedFile, "the operator's log names the file")
}
