package memory

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestArenaIsNeverCopied: a chunk's arena is made to the size its items are
// expected to take; when they turn out larger, the arena is not regrown (its
// bytes are never copied), the rest of the chunk's items go to a second
// arena, and every item reads back as it was appended: messages by Read,
// Lookup, a duplicate's answer and the byte count, audit records by
// ReadAudit. The chunk after is sized from what the spilled one took.
func TestArenaIsNeverCopied(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	small, large := make([]byte, 100), []byte(strings.Repeat("b", 300))

	t.Run("messages", func(t *testing.T) {
		s := New(nil)
		ctx := t.Context()
		var want []store.Message
		add := func(i int, body []byte) {
			m := store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: t0, Body: body,
				IdemKey: "a\x00p\x00k" + strconv.Itoa(i), IdemExpires: t0.Add(time.Hour)}
			stored, dup, err := s.Append(ctx, m)
			require.NoError(t, err)
			require.False(t, dup)
			want = append(want, stored)
		}
		for i := range chunkLen + 1 {
			add(i, small)
		}
		sl := s.msgs.subjects["a"]
		require.Len(t, sl.chunks, 2)
		arena := &sl.chunks[1].data[:1][0]
		const switchAt = chunkLen / 2
		for i := chunkLen + 1; i < 2*chunkLen; i++ {
			body := small
			if i >= chunkLen+switchAt {
				body = large // the arena, sized for small bodies, runs out
			}
			add(i, body)
		}
		second := &sl.chunks[1]
		require.Same(t, arena, &second.data[:1][0], "the arena was not regrown")
		require.NotNil(t, second.spill, "the rest went to a second arena")
		require.Greater(t, second.spillAt, switchAt)
		require.Less(t, second.spillAt, chunkLen)
		add(2*chunkLen, small)
		require.Equal(t, withSlack(second.used()), cap(sl.chunks[2].data), "the next chunk is sized from all the spilled one took")

		got, err := s.Read(ctx, "a", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		var total uint64
		for i, m := range got {
			w := want[i]
			require.Equal(t, w.ID, m.ID)
			require.Equal(t, w.IdemKey, m.IdemKey)
			require.Equal(t, w.Body, m.Body, "message %d", i)
			total += uint64(len(w.Body))
		}
		n, err := s.Bytes(ctx, "a")
		require.NoError(t, err)
		require.Equal(t, total, n)
		for _, i := range []int{chunkLen + second.spillAt - 1, chunkLen + second.spillAt, 2*chunkLen - 1} {
			m, err := s.Lookup(ctx, want[i].ID)
			require.NoError(t, err)
			require.Equal(t, want[i].Body, m.Body, "message %d", i)
			orig, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "again", Time: t0, IdemKey: want[i].IdemKey, IdemExpires: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.True(t, dup)
			require.Equal(t, want[i].ID, orig.ID)
			require.Equal(t, want[i].Body, orig.Body)
		}
		k, err := s.TrimToBytes(ctx, "a", uint64(len(large)))
		require.NoError(t, err)
		require.Equal(t, len(want)-1, k, "the byte count of the spilled messages was kept")
	})

	t.Run("a first message larger than the arena", func(t *testing.T) {
		s := New(nil)
		ctx := t.Context()
		appendN(t, s, 0, chunkLen, small)
		huge := []byte(strings.Repeat("h", 1<<20))
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "huge", Time: t0, Body: huge})
		require.NoError(t, err)
		sl := s.msgs.subjects["a"]
		second := &sl.chunks[1]
		require.Zero(t, second.spillAt, "it went to a second arena")
		spill := &second.spill[0]
		appendN(t, s, chunkLen+1, chunkLen-1, small)
		require.Same(t, spill, &second.spill[0], "which holds the rest of the chunk too: the message is not copied again")
		m, err := s.Lookup(ctx, "huge")
		require.NoError(t, err)
		require.Equal(t, huge, m.Body)
	})

	t.Run("audit records", func(t *testing.T) {
		s := New(nil)
		ctx := t.Context()
		recs := brokerAudit(2 * auditChunkLen)
		for i := auditChunkLen + auditChunkLen/2; i < len(recs); i++ {
			r := &recs[i] // longer than the arena was sized for
			r.Ref = fmt.Sprintf("ref_%0200d", i)
			r.PrevHash = recs[i-1].Hash
			r.Hash = r.ComputeHash()
		}
		require.NoError(t, s.AppendAudit(ctx, recs[:auditChunkLen+1]...))
		l := &s.audit
		arena := &l.chunks[1].data[:1][0]
		require.NoError(t, s.AppendAudit(ctx, recs[auditChunkLen+1:]...))
		require.Same(t, arena, &l.chunks[1].data[:1][0], "the arena was not regrown")
		require.NotNil(t, l.chunks[1].spill, "the rest went to a second arena")
		got, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		requireAudit(t, utc(recs...), got, "all")
	})
}
