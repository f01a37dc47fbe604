package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon/store"
	"pigeon/store/jetstream"
)

func runServer(t *testing.T) string {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func TestAuditVerify(t *testing.T) {
	url := runServer(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	for _, node := range []string{"a", "b"} {
		s, err := jetstream.Open(t.Context(), nc, &jetstream.Options{Node: node})
		require.NoError(t, err)
		require.NoError(t, s.ChainAudit(t.Context(), []store.AuditRecord{{Type: "x", Time: time.Now()}}))
	}
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"audit", "verify", "--store", url}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Equal(t, "pigeon audit verify: the audit chain of node a holds: 1 records\npigeon audit verify: the audit chain of node b holds: 1 records\n", out.String())
}

func TestServeUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := fmt.Sprintf("nats://%s", l.Addr())
	l.Close()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"serve", "--store", url, "--node", "n1", "--addr", "127.0.0.1:0"}, &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "cannot reach NATS at "+url)
	// The port was closed: every dial was refused. Another process that
	// took the port meanwhile would fail the dial otherwise.
	require.Contains(t, errb.String(), nats.ErrNoServers.Error())
}

func TestServeNeedsNode(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 2, run(t.Context(), []string{"serve", "--store", "nats://127.0.0.1:4222"}, &out, &errb))
	require.Contains(t, errb.String(), "--node")
}
