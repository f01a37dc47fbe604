package jetstream

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestRefusedPublishFreesItsID: an append indexes its message id, and
// claims its idempotency key, before it publishes. A publish NATS or
// JetStream refuses outright (over the server's max_payload, over the
// stream's max_msg_size) stores nothing, yet the id's entry, and for
// max_payload the key's claim too, stayed: the next append of the id (the
// client's retry with a smaller body) waited twice the store's timeout
// for a message that could never come before taking the id over. A
// refused append leaves neither the id nor the key held.
func TestRefusedPublishFreesItsID(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	// A store timeout far beyond the test's own: an id or key still held
	// makes the next append wait out the test's deadline.
	const timeout = 10 * time.Minute
	for name, refuse := range map[string]func(t *testing.T, s *Store) []byte{
		"over max_payload": func(t *testing.T, s *Store) []byte {
			return bytes.Repeat([]byte("x"), int(nc.MaxPayload())+1)
		},
		"over the stream's max_msg_size": func(t *testing.T, s *Store) []byte {
			ctx := t.Context()
			_, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: "warm", Time: time.Now().UTC()})
			require.NoError(t, err)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			st, err := js.Stream(ctx, s.msgStream("orders"))
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			cfg.MaxMsgSize = 1024
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)
			return bytes.Repeat([]byte("x"), 2048)
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Open(t.Context(), nc, &Options{Prefix: freshPrefix(), Memory: true, Timeout: timeout})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			now := time.Now().UTC()
			m := store.Message{Subject: "orders", ID: "X", Time: now, IdemKey: "K", IdemExpires: now.Add(time.Hour), Body: refuse(t, s)}
			_, _, err = s.Append(ctx, m)
			require.Error(t, err, "the publish is refused")

			held, err := leaderLast(ctx, nc, s.bucketName("ids"), token("X"))
			require.NoError(t, err)
			require.Nil(t, held, "the refused message's id is still indexed")
			claimed, err := leaderLast(ctx, nc, s.bucketName("idem"), token("K"))
			require.NoError(t, err)
			require.Nil(t, claimed, "the refused message's key is still claimed")

			m.Body = []byte("small")
			got, dup, err := s.Append(ctx, m)
			require.NoError(t, err, "the retry with a body that fits")
			require.False(t, dup)
			require.Equal(t, "small", string(got.Body))
			found, err := s.Lookup(ctx, "X")
			require.NoError(t, err)
			require.Equal(t, "small", string(found.Body))
		})
	}
}
