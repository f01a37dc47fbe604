package jetstream

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReplyLargerThanMaxPayloadReachesAnotherNode: a reply admitted on
// node a for a requester waiting on node b travels as a notice in the
// <P>_replies bucket. The notice (the reply with its data in JSON, and
// any binary data in base64 inside that) may be larger than the NATS
// server's max_payload although the reply itself fit: the server refused
// the write, Notify dropped the error, and the reply was lost across
// nodes, silently. A notice too large is now written in parts that node
// b reads back, so the reply arrives whole; a small one is as it was.
func TestReplyLargerThanMaxPayloadReachesAnotherNode(t *testing.T) {
	const maxPayload = 8 << 10
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		MaxPayload: maxPayload,
	})
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := freshPrefix()

	node := func(name string) *Cluster {
		_, cl := prefixNode(ctx, t, srv.ClientURL(), prefix, name)
		return cl
	}
	a, b := node("a"), node("b")
	got := make(chan pigeon.ClusterChange, 16)
	wctx, wcancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = b.Watch(wctx, func(c pigeon.ClusterChange) {
			if c.Kind == pigeon.ChangeReply {
				got <- c
			}
		})
	}()
	defer func() { wcancel(); <-watched }()
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.ready
	}, 10*time.Second, 5*time.Millisecond, "node b's watch never began")

	for _, tc := range []struct {
		name string
		data int // bytes of the reply's data
	}{
		{"Small", 100},
		{"DataJustUnderMaxPayload", maxPayload - 200},
		{"DataSeveralTimesMaxPayload", 5 * maxPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(strings.Repeat("x", tc.data-2))
			require.NoError(t, err)
			reply := &pigeon.Message{ID: "r-" + tc.name, Subject: "s", Data: data}
			a.Notify(pigeon.ClusterChange{Kind: pigeon.ChangeReply, RequestID: "req-" + tc.name, Requester: "alice", Reply: reply})
			select {
			case c := <-got:
				require.Equal(t, "req-"+tc.name, c.RequestID)
				require.Equal(t, "alice", c.Requester)
				require.NotNil(t, c.Reply)
				require.Equal(t, reply.ID, c.Reply.ID)
				require.JSONEq(t, string(data), string(c.Reply.Data))
			case <-time.After(10 * time.Second):
				t.Fatalf("node b never got the reply of %d bytes of data (max_payload %d)", tc.data, maxPayload)
			}
		})
	}
}
