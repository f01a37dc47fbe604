package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestTrimmedIDFreeAtOnce: the id of a trimmed message is free again
// (store.Message.ID is unique among the messages held; Lookup no longer
// finds it, and the memory and WAL stores take it again at once). Its
// entry in the ids bucket stays, so an append of the id found it taken
// and waited until the append that wrote it could no longer be under way,
// 2×Options.Timeout after the entry was written: an id re-used soon after
// its message was trimmed (a count bound trims a busy subject's messages
// within seconds) stalled the publish for up to 10 s by default. A trim
// now frees the entries of the messages it removes, so
// the re-use is taken at once, on the message's subject or another. A
// retained message still holds its id, and an entry whose message is not
// stored yet (its append under way) is still waited for.
func TestTrimmedIDFreeAtOnce(t *testing.T) {
	srv := runServer(t)
	// Timeout sets how long an append waits for a claim's message: an
	// hour here, so that a wait the trim should have spared never ends
	// within the test, whatever the machine's speed.
	s, err := Open(t.Context(), connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: time.Hour})
	require.NoError(t, err)
	now := time.Now().UTC()
	for _, tc := range []struct{ id, subject, again string }{
		{"X", "a", "a"}, // re-used on its own subject
		{"Y", "b", "d"}, // and on another
	} {
		t.Run(tc.id+" on "+tc.again, func(t *testing.T) {
			// The deadline only ends a stalled append; a prompt one is
			// done well before it.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			st, _, err := s.Append(ctx, store.Message{Subject: tc.subject, ID: tc.id, Time: now, Body: []byte("first")})
			require.NoError(t, err)
			_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: tc.id, Time: now})
			require.ErrorIs(t, err, store.ErrExists, "a retained message holds its id")
			n, err := s.TrimThrough(ctx, tc.subject, st.Seq)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			_, err = s.Lookup(ctx, tc.id)
			require.ErrorIs(t, err, store.ErrNotFound)

			_, _, err = s.Append(ctx, store.Message{Subject: tc.again, ID: tc.id, Time: now, Body: []byte("again")})
			require.NoError(t, err)
			got, err := s.Lookup(ctx, tc.id)
			require.NoError(t, err)
			require.Equal(t, "again", string(got.Body))
			require.Equal(t, tc.again, got.Subject)
			_, _, err = s.Append(ctx, store.Message{Subject: "c", ID: tc.id, Time: now})
			require.ErrorIs(t, err, store.ErrExists, "the re-used id is held again")
		})
	}

	// An append under way (its id claimed, its message not published yet)
	// keeps its id: another append of it waits rather than take it.
	ctx := t.Context()
	_, err = s.ids.Create(ctx, token("P"), []byte("a"))
	require.NoError(t, err)
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	_, _, err = s.Append(short, store.Message{Subject: "b", ID: "P", Time: now})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = s.Lookup(ctx, "P")
	require.ErrorIs(t, err, store.ErrNotFound)
}
