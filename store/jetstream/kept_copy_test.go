package jetstream

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestLargeKeyedMessageTrims: a trim keeps a copy of each trimmed message
// whose idempotency key is live, in a KV bucket. The copy was JSON, its
// body base64 (a third larger), so a message the stream took, near NATS's
// max_payload, made a copy NATS refused: every trim of its subject failed
// until the key expired (a publisher holding retention of a subject off
// for its idempotency window with one large message). The copy keeps the
// body as it is, so whatever the stream took can be kept, and a retry
// is still answered with the original.
func TestLargeKeyedMessageTrims(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	nc := connect(t, srv.ClientURL())
	s, err := Open(ctx, nc, &Options{Prefix: freshPrefix(), Memory: true, Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
	body := bytes.Repeat([]byte("0123456789abcdef"), int(nc.MaxPayload())*4/5/16)
	now := time.Now().UTC()
	m := store.Message{Subject: "big", ID: "m1", Time: now, IdemKey: "k1", IdemExpires: now.Add(time.Hour), Body: body}
	_, _, err = s.Append(ctx, m)
	require.NoError(t, err, "the stream takes the message")
	_, _, err = s.Append(ctx, store.Message{Subject: "big", ID: "m2", Time: now, Body: []byte("small")})
	require.NoError(t, err)

	n, err := s.TrimThrough(ctx, "big", 1)
	require.NoError(t, err, "retention trims the subject")
	require.Equal(t, 1, n)

	retry := m
	retry.ID = "m1-retry"
	orig, dup, err := s.Append(ctx, retry)
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "m1", orig.ID)
	require.Equal(t, "k1", orig.IdemKey)
	require.Equal(t, uint64(1), orig.Seq)
	require.True(t, bytes.Equal(body, orig.Body), "the original's body")
}

// TestKeptCopyForms: a copy written in the earlier form (JSON, under the
// message id alone) still answers, but only for the key it holds; the
// binary form reads back as written, and a cut or damaged one is
// reported, not read.
func TestKeptCopyForms(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	now := time.Now().UTC()
	m := store.Message{Subject: "s\xff", Seq: 7, ID: "m1", Time: now, IdemKey: "k1", IdemExpires: now.Add(time.Hour), Body: []byte("body")}
	val, err := json.Marshal(keptRecord{keptMessage: keptMessage(m), RawSubject: rawText(m.Subject)})
	require.NoError(t, err)
	_, err = s.idem.Create(ctx, legacyKeptKey(m.ID), val)
	require.NoError(t, err)
	got, err := s.kept(ctx, "m1", "k1")
	require.NoError(t, err)
	require.Equal(t, m, got)
	_, err = s.kept(ctx, "m1", "k2")
	require.ErrorIs(t, err, store.ErrNotFound, "another key's copy does not answer")

	for _, m := range []store.Message{m, {Subject: "a", ID: "b", IdemKey: " c\n", Time: time.Unix(0, 1).UTC(), IdemExpires: time.Unix(0, -5).UTC()}} {
		b := encodeKept(m)
		got, ok := decodeKept(b)
		require.True(t, ok)
		require.Equal(t, m, got)
		for i := 1; i < len(b)-len(m.Body); i++ {
			_, ok := decodeKept(b[:i])
			require.False(t, ok, "cut at %d", i)
		}
	}
	_, err = s.idem.Put(ctx, keptKey("m9", "k9"), []byte{keptVersion, 0xff})
	require.NoError(t, err)
	_, err = s.kept(ctx, "m9", "k9")
	require.ErrorIs(t, err, store.ErrCorrupt)
}
