package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestMessageIDUniqueAcrossNodes: the engine refuses a publisher-chosen
// message id it already holds (MESSAGE_ID_TAKEN) by a lookup under a lock
// of its own process, so two nodes that look the id up at once both find
// it free and both append. The store must then keep one: the second
// append, on another node, is refused with store.ErrExists and stores
// nothing, on another subject (two messages of one id) as on the same one
// (where JetStream's deduplication would answer the second with the
// first's sequence, accepting a message never stored).
func TestMessageIDUniqueAcrossNodes(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	prefix := freshPrefix()
	open := func(node string) *Store {
		s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: node, Memory: true, Timeout: time.Second})
		require.NoError(t, err)
		return s
	}
	a, b := open("a"), open("b")
	now := time.Now()
	_, _, err := a.Append(ctx, store.Message{Subject: "orders", ID: "m1", Time: now, Body: []byte("a")})
	require.NoError(t, err)

	for _, subject := range []string{"refunds", "orders"} {
		_, _, err := b.Append(ctx, store.Message{Subject: subject, ID: "m1", Time: now, Body: []byte("b"),
			IdemKey: "k-" + subject, IdemExpires: now.Add(time.Hour)})
		require.ErrorIs(t, err, store.ErrExists, subject)
		// The refused append gave its idempotency key back.
		_, dup, err := a.Append(ctx, store.Message{Subject: subject, ID: "m-" + subject, Time: now,
			IdemKey: "k-" + subject, IdemExpires: now.Add(time.Hour)})
		require.NoError(t, err)
		require.False(t, dup, subject)
	}
	got, err := b.Lookup(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, "a", string(got.Body))
	orders, err := b.Read(ctx, "orders", 0, 0)
	require.NoError(t, err)
	require.Len(t, orders, 2) // m1 and m-orders
	refunds, err := b.Read(ctx, "refunds", 0, 0)
	require.NoError(t, err)
	require.Len(t, refunds, 1) // m-refunds only

	// An id indexed by an append whose message never came (its node died
	// between the two writes) is free again once that append cannot
	// still be under way.
	_, err = a.ids.Put(ctx, token("ghost"), []byte("orders"))
	require.NoError(t, err)
	_, _, err = b.Append(ctx, store.Message{Subject: "refunds", ID: "ghost", Time: now, Body: []byte("b")})
	require.NoError(t, err)
	got, err = a.Lookup(ctx, "ghost")
	require.NoError(t, err)
	require.Equal(t, "refunds", got.Subject)
}
