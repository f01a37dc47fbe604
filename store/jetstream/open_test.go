package jetstream

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestConnectUnreachable: Connect names the server it cannot reach. The
// server is a port this test bound and closed, so that nothing listens on
// it: a closed port is the fixture, not a port handed to a server. Should
// another process take it meanwhile, the connection is not refused and
// the test fails rather than pass against a stranger.
func TestConnectUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + l.Addr().String()
	require.NoError(t, l.Close())
	_, err = Connect(t.Context(), url, nil, nats.Timeout(500*time.Millisecond))
	require.ErrorIs(t, err, nats.ErrNoServers, "every connection refused")
	require.ErrorContains(t, err, url)

	// With a user and password, the error names the URL without the
	// password: it reaches logs and the operator's terminal.
	withUser := "nats://pigeon:s3cret@" + l.Addr().String()
	_, err = Connect(t.Context(), withUser, nil, nats.Timeout(500*time.Millisecond))
	require.ErrorIs(t, err, nats.ErrNoServers)
	require.ErrorContains(t, err, "nats://pigeon:xxxxx@"+l.Addr().String())
	require.NotContains(t, err.Error(), "s3cret")
}

// TestRedactedURLs: each URL of a list loses the password of its user
// info, and nothing else.
func TestRedactedURLs(t *testing.T) {
	require.Equal(t, "nats://a:4222,nats://u:xxxxx@b:4222,tls://c", RedactedURLs("nats://a:4222,nats://u:secret@b:4222,tls://c"))
	require.Equal(t, "nats://u@b:4222", RedactedURLs("nats://u@b:4222"))
}

// TestOpenRefusesChangedStreams: a stream or bucket that another tool
// changed so that records would vanish is refused when a node starts,
// with the reason.
func TestOpenRefusesChangedStreams(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cases := []struct {
		name   string
		stream func(s *Store) string
		change func(c *jetstream.StreamConfig)
		reason string
	}{
		{"message stream max age", func(s *Store) string { return s.msgStream("orders") },
			func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, "max age"},
		{"message stream limit", func(s *Store) string { return s.msgStream("orders") },
			func(c *jetstream.StreamConfig) { c.MaxMsgs = 10 }, "limit"},
		{"audit stream subjects", func(s *Store) string { return s.auditStream("node") },
			func(c *jetstream.StreamConfig) { c.Subjects = append(c.Subjects, "elsewhere") }, "subjects"},
		{"bucket max age", func(s *Store) string { return "KV_" + s.bucketName("contracts") },
			func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour }, "max age"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
			require.NoError(t, err)
			_, _, err = s.Append(ctx, store.Message{Subject: "orders", ID: "m1", Time: time.Now()})
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx))

			st, err := js.Stream(ctx, c.stream(s))
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			c.change(&cfg)
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)

			_, err = Open(ctx, nc, &Options{Prefix: s.Prefix()})
			require.Error(t, err)
			require.Contains(t, err.Error(), c.stream(s))
			require.Contains(t, err.Error(), c.reason)
		})
	}
}

func TestOptionsValidated(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	_, err := Open(t.Context(), nc, &Options{Prefix: "a.b"})
	require.ErrorContains(t, err, "prefix")
	_, err = Open(t.Context(), nc, &Options{Node: "n 1"})
	require.ErrorContains(t, err, "node")
}
