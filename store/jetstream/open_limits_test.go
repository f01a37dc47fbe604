package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestOpenRefusesPerSubjectLimit: a node's audit chain is one NATS subject
// in its stream, so a per-subject message limit set on the stream by
// another tool (max_msgs_per_subject) drops the chain's oldest batches
// with every append, silently, and the chain no longer verifies; nor may
// a message stream keep fewer messages per NATS subject than it is given.
// A node refused the other limits (messages, bytes, age) at start but
// took this one.
func TestOpenRefusesPerSubjectLimit(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for name, stream := range map[string]func(s *Store) string{
		"audit stream":   func(s *Store) string { return s.auditStream("node") },
		"message stream": func(s *Store) string { return s.msgStream("orders") },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s, err := Open(ctx, nc, &Options{Prefix: freshPrefix()})
			require.NoError(t, err)
			_, _, err = s.Append(ctx, store.Message{Subject: "orders", ID: "m1", Time: time.Now()})
			require.NoError(t, err)
			require.NoError(t, s.Close(ctx))

			st, err := js.Stream(ctx, stream(s))
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			cfg.MaxMsgsPerSubject = 1
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)

			_, err = Open(ctx, nc, &Options{Prefix: s.Prefix()})
			require.Error(t, err, "a stream that drops records per subject is refused")
			require.Contains(t, err.Error(), stream(s))
			require.Contains(t, err.Error(), "per subject")
		})
	}
}
