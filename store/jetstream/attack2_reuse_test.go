package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestTrimmedIDReusableTwice: a trimmed message's id is free again; the
// append re-using it is published under a deduplication id naming the
// trimmed message's sequence, since JetStream still remembers the id
// itself for its duplicate window. An id trimmed a second time within the
// window met that deduplication id's own message, which was only checked
// for being trimmed the first time: the third append was refused
// store.ErrExists (MESSAGE_ID_TAKEN) though Lookup found no message, as
// the memory and WAL stores would take it.
func TestTrimmedIDReusableTwice(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	now := time.Now().UTC()
	for i, body := range []string{"first", "second", "third", "fourth"} {
		st, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "X", Time: now, Body: []byte(body)})
		require.NoError(t, err, "append %d of the id", i+1)
		require.Equal(t, uint64(i+1), st.Seq)
		got, err := s.Lookup(ctx, "X")
		require.NoError(t, err)
		require.Equal(t, body, string(got.Body))
		_, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "X", Time: now, Body: []byte("taken")})
		require.ErrorIs(t, err, store.ErrExists, "a retained message holds its id")
		n, err := s.TrimThrough(ctx, "a", st.Seq)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
}
