package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestTrimmedIDReusableOnItsSubject: a message id is also JetStream's
// deduplication id, remembered for the stream's duplicate window (two
// minutes) whatever retention trims. Once the message of an id is trimmed
// the id is free (Lookup answers not found, and the memory and WAL stores
// take it again), but an append of it on the same subject within the
// window was refused store.ErrExists. Nor may two ids that differ only in
// white space, which a NATS header does not keep, be one to JetStream.
func TestTrimmedIDReusableOnItsSubject(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	now := time.Now().UTC()
	for _, id := range []string{"X", "Y"} {
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: id, Time: now, Body: []byte(id)})
		require.NoError(t, err)
	}
	n, err := s.TrimThrough(ctx, "a", 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = s.Lookup(ctx, "X")
	require.ErrorIs(t, err, store.ErrNotFound)

	st, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "X", Time: now, Body: []byte("again")})
	require.NoError(t, err)
	require.Equal(t, uint64(3), st.Seq)
	got, err := s.Lookup(ctx, "X")
	require.NoError(t, err)
	require.Equal(t, "again", string(got.Body))
	// A retained message still holds its id.
	_, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "X", Time: now})
	require.ErrorIs(t, err, store.ErrExists)

	st, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "Y ", Time: now, Body: []byte("y space")})
	require.NoError(t, err)
	require.Equal(t, uint64(4), st.Seq)
	ms, err := s.Read(ctx, "a", 0, 0)
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.Equal(t, []string{"Y", "X", "Y "}, []string{ms[0].ID, ms[1].ID, ms[2].ID})
}

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
