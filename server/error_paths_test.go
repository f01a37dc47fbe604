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
	"pigeon/store"
	"pigeon/store/memory"
)

// damagedStore is a memory store whose appends find damaged data at a
// path of the server's disk.
type damagedStore struct {
	*memory.Store
}

const damagedFile = "/var/lib/pigeon/subjects/payments.authorize/0000000001.log"

func (damagedStore) Append(context.Context, store.Message) (store.Message, bool, error) {
	return store.Message{}, false, &store.CorruptError{File: damagedFile, Offset: 4096, Reason: "bad checksum"}
}

// A store that finds damaged data names the file and the offset; the
// answer to the client keeps the code (STORE_CORRUPT) but not where the
// server keeps its data: that goes to the server's log, for the operator.
func TestStoreDamageDoesNotNameServerPaths(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
		Store:         damagedStore{memory.New(nil)},
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
	require.Contains(t, logs.String(), damagedFile, "the operator's log names the file")
}
