package memory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// appendN appends n messages of body to subject a of s, ids from "m"+from.
func appendN(t *testing.T, s *Store, from, n int, body []byte) {
	t.Helper()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := from; i < from+n; i++ {
		_, _, err := s.Append(t.Context(), store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: t0, Body: body})
		require.NoError(t, err)
	}
}

// TestNextChunkIsPreparedAhead: once a log's chunk has filled, the chunk
// after the last one is made (and its pages touched) on a goroutine of its
// own as soon as the last one begins, sized as the last full one, and the
// append that begins it takes that one rather than making its own; the
// spares' bytes are counted while they wait.
func TestNextChunkIsPreparedAhead(t *testing.T) {
	s := New(nil)
	body := make([]byte, 100)
	appendN(t, s, 0, chunkLen, body)
	sl := s.msgs.subjects["a"]
	require.False(t, sl.spare.preparing, "the first chunk's arena size is not known until it fills: nothing is prepared while it does")
	ready := func() bool { return sl.spare.ready.Load() != nil }

	appendN(t, s, chunkLen, 1, body)
	require.True(t, sl.spare.preparing, "the second chunk begun, the third is prepared")
	require.Eventually(t, ready, 10*time.Second, time.Millisecond)
	spare := sl.spare.ready.Load()
	require.Equal(t, sl.arenaSize, cap(spare.data), "sized as the last full chunk's arena")
	require.Equal(t, chunkLen, cap(spare.hdrs))
	require.Equal(t, int64(cap(spare.data)), s.msgs.spares.bytes.Load())

	appendN(t, s, chunkLen+1, chunkLen, body) // the rest of the second chunk, and the first of the third
	require.Len(t, sl.chunks, 3)
	third := sl.chunks[2]
	require.Same(t, &spare.data[:1][0], &third.data[0], "the third chunk is the spare")
	require.Len(t, third.hdrs, 1)
	require.True(t, sl.spare.preparing, "the third chunk begun, the fourth is prepared")
	require.Eventually(t, ready, 10*time.Second, time.Millisecond)
	require.NotSame(t, spare, sl.spare.ready.Load())
	require.Equal(t, int64(cap(sl.spare.ready.Load().data)), s.msgs.spares.bytes.Load(), "only the fourth's bytes are counted")

	got, err := s.Read(t.Context(), "a", 2*chunkLen, 0)
	require.NoError(t, err)
	require.Len(t, got, 2, "the last message of the second chunk and the first of the third")
	require.Equal(t, "m"+strconv.Itoa(2*chunkLen), got[1].ID)
	require.Equal(t, body, got[1].Body)
}

// TestSpareBounds: a spare much smaller than the last full chunk took is
// dropped (and its bytes given back); no spare is prepared past
// maxSpareBytes; Close waits for a chunk being prepared.
func TestSpareBounds(t *testing.T) {
	t.Run("too small", func(t *testing.T) {
		s := New(nil)
		appendN(t, s, 0, chunkLen+1, make([]byte, 10))
		sl := s.msgs.subjects["a"]
		require.Eventually(t, func() bool { return sl.spare.ready.Load() != nil }, 10*time.Second, time.Millisecond)
		spare := sl.spare.ready.Load()
		// The rest of the second chunk is far larger than its start: it
		// spills, and the third wants more than the spare holds.
		appendN(t, s, chunkLen+1, chunkLen-1, make([]byte, 1000))
		appendN(t, s, 2*chunkLen, 1, nil)
		third := sl.chunks[2]
		require.NotSame(t, &spare.data[:1][0], &third.data[0], "the spare is dropped")
		require.Equal(t, sl.arenaSize, cap(third.data), "made to the size wanted")
		require.Equal(t, withSlack(sl.chunks[1].used()), sl.arenaSize)
		require.Eventually(t, func() bool { return sl.spare.ready.Load() != nil }, 10*time.Second, time.Millisecond)
		require.Equal(t, int64(sl.arenaSize), s.msgs.spares.bytes.Load(), "the dropped spare's bytes are given back; the fourth's are counted")
	})
	t.Run("store bound", func(t *testing.T) {
		s := New(nil)
		s.msgs.spares.bytes.Store(maxSpareBytes) // the store's spares are at their bound
		appendN(t, s, 0, chunkLen+1, make([]byte, 10))
		sl := s.msgs.subjects["a"]
		require.False(t, sl.spare.preparing)
		require.Nil(t, sl.spare.ready.Load())
		require.Equal(t, int64(maxSpareBytes), s.msgs.spares.bytes.Load())
	})
	t.Run("close", func(t *testing.T) {
		s := New(nil)
		appendN(t, s, 0, chunkLen+1, make([]byte, 10))
		// Close waits for the goroutine preparing the next chunk, which
		// needs no lock Close holds.
		require.NoError(t, s.Close(context.Background()))
		_, _, err := s.Append(t.Context(), store.Message{Subject: "a", ID: "after"})
		require.ErrorIs(t, err, store.ErrClosed)
	})
}

// TestIndexTablesArePreparedAhead: once the id index or the claims table is
// close to growing, the table it grows into is made on a goroutine of its
// own and handed over on a later append; the index grows into it, and
// every id and key is found as before. Close waits for a table being made.
func TestIndexTablesArePreparedAhead(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	add := func() {
		id := strconv.Itoa(n)
		_, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + id, Time: t0, IdemKey: "k" + id, IdemExpires: t0.Add(time.Hour)})
		require.NoError(t, err)
		require.False(t, dup)
		n++
	}
	l := &s.msgs
	for l.ids.next == nil || l.idem.keys.next == nil {
		add()
	}
	ids, keys := l.ids.next, l.idem.keys.next
	require.Eventually(t, func() bool { return ids.ready.Load() != nil && keys.ready.Load() != nil }, 10*time.Second, time.Millisecond)
	add()
	require.Nil(t, l.ids.next, "handed over")
	require.Nil(t, l.idem.keys.next)
	require.Zero(t, l.ids.byHash.SpareWanted(), "the index holds it")
	cap0 := l.ids.byHash.Cap()
	for l.ids.byHash.Cap() == cap0 {
		add()
	}
	require.Equal(t, 2*cap0, l.ids.byHash.Cap(), "grown to the prepared size")
	for i := range n {
		m, err := s.Lookup(ctx, "m"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, "k"+strconv.Itoa(i), m.IdemKey)
	}
	orig, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "again", Time: t0, IdemKey: "k7", IdemExpires: t0.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, dup)
	require.Equal(t, "m7", orig.ID)

	for l.ids.next == nil {
		add()
	}
	require.NoError(t, s.Close(context.Background()), "waits for the table being made")
}
