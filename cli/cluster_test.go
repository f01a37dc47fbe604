package cli

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStoreFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--store", "nats://a:4222"}, "nats://a:4222"},
		{[]string{"-store=nats://a:4222,nats://b:4222", "--addr", "x"}, "nats://a:4222,nats://b:4222"},
		{[]string{"--addr", "x"}, ""},
		{[]string{"--store"}, ""},
		{[]string{"--storex", "nats://a"}, ""},
	}
	for _, c := range cases {
		require.Equal(t, c.want, storeFlag(c.args), "%v", c.args)
	}
	require.True(t, isClusterStore("nats://a:4222"))
	require.False(t, isClusterStore("wal"))
}

// Without pigeon-cluster beside it or on PATH, serve --store nats:// says
// how to build it.
func TestServeClusterStoreNeedsClusterBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errb bytes.Buffer
	code := serveCmd(context.Background(), nil, []string{"--store", "nats://127.0.0.1:4222"}, &out, &errb)
	require.Equal(t, 2, code)
	require.Contains(t, errb.String(), "needs the pigeon-cluster binary")
	require.Contains(t, errb.String(), "go build -o pigeon-cluster ./cmd/pigeon-cluster")
}
