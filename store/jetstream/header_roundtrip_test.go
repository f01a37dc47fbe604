package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestIDsAndKeysReadBackVerbatim: a message's id and idempotency key are
// kept in NATS headers, whose values lose leading and trailing white space
// and cannot hold line breaks; the broker's keys hold NUL separators and
// a publisher chooses ids and keys freely. What Read, Lookup and a
// duplicate answer (before and after a trim) must be what was appended.
func TestIDsAndKeysReadBackVerbatim(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: time.Second})
	require.NoError(t, err)
	now := time.Now().UTC()
	ids := []string{" lead", "trail ", "tab\t", "a\r\nPigeon-Idem: evil", "nul\x00x", "\xff\xfe", "plain"}
	var want []store.Message
	for i, id := range ids {
		m := store.Message{Subject: "h", ID: id, Time: now, Body: []byte{byte('a' + i)},
			IdemKey: "h\x00p\x00" + id + " ", IdemExpires: now.Add(time.Hour)}
		st, dup, err := s.Append(ctx, m)
		require.NoError(t, err)
		require.False(t, dup)
		want = append(want, st)
	}
	got, err := s.Read(ctx, "h", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, len(ids))
	for i, w := range want {
		require.Equal(t, w.ID, got[i].ID, "read id %q", w.ID)
		require.Equal(t, w.IdemKey, got[i].IdemKey, "read key of %q", w.ID)
		l, err := s.Lookup(ctx, w.ID)
		require.NoError(t, err)
		require.Equal(t, w.ID, l.ID, "lookup id")
		require.Equal(t, w.IdemKey, l.IdemKey, "lookup key")
		d, dup, err := s.Append(ctx, store.Message{Subject: "h", ID: "retry", Time: now, IdemKey: w.IdemKey, IdemExpires: now.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, dup, "duplicate of %q", w.ID)
		require.Equal(t, w.ID, d.ID, "duplicate of %q", w.ID)
	}
	// A subject that is not UTF-8 names its messages' claims as well.
	odd := store.Message{Subject: "\xfe", ID: "odd", Time: now, IdemKey: "\xfek", IdemExpires: now.Add(time.Hour)}
	_, _, err = s.Append(ctx, odd)
	require.NoError(t, err)
	odd.ID = "odd-retry"
	d, dup, err := s.Append(ctx, odd)
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "odd", d.ID)
	require.Equal(t, "\xfe", d.Subject)

	// Trimmed while their keys are live, they are answered from their kept
	// copies, which must hold the same id and key.
	n, err := s.TrimThrough(ctx, "h", uint64(len(ids)))
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	for _, w := range want {
		d, dup, err := s.Append(ctx, store.Message{Subject: "h", ID: "retry2", Time: now, IdemKey: w.IdemKey, IdemExpires: now.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, dup, "kept %q", w.ID)
		require.Equal(t, w.ID, d.ID, "kept id")
		require.Equal(t, w.IdemKey, d.IdemKey, "kept key")
	}
}
