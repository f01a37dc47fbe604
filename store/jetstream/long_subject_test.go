package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestLongSubjectNames: a Pigeon subject is a stream named by its hex, and
// JetStream refuses a stream name over 255 bytes, so a subject of more
// than about 120 bytes could hold no message at all (the WAL store keeps
// any name). Long subjects must work like short ones, each its own log,
// and be listed by their names.
func TestLongSubjectNames(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: time.Second})
	require.NoError(t, err)
	now := time.Now().UTC()
	long := strings.Repeat("s", 200)
	subjects := []string{long + "a", long + "b", strings.Repeat("\xff", 3000), "short"}
	for i, subject := range subjects {
		for j := range 2 {
			id := string(rune('a'+i)) + string(rune('0'+j))
			st, _, err := s.Append(ctx, store.Message{Subject: subject, ID: id, Time: now, Body: []byte(id)})
			require.NoError(t, err, "subject %d", i)
			require.Equal(t, uint64(j+1), st.Seq)
			got, err := s.Lookup(ctx, id)
			require.NoError(t, err)
			require.Equal(t, subject, got.Subject)
			require.Equal(t, id, string(got.Body))
		}
		ms, err := s.Read(ctx, subject, 0, 0)
		require.NoError(t, err)
		require.Len(t, ms, 2)
		first, last, err := s.Bounds(ctx, subject)
		require.NoError(t, err)
		require.Equal(t, [2]uint64{1, 2}, [2]uint64{first, last})
	}
	listed, err := s.ListMessageSubjects(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, subjects, listed)

	n, err := s.TrimThrough(ctx, subjects[0], 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	first, last, err := s.Bounds(ctx, subjects[0])
	require.NoError(t, err)
	require.Equal(t, [2]uint64{2, 2}, [2]uint64{first, last})
	first, last, err = s.Bounds(ctx, subjects[1])
	require.NoError(t, err)
	require.Equal(t, [2]uint64{1, 2}, [2]uint64{first, last})
}
