package memory

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// These tests look at what the public API cannot see: memory that must be
// let go.

func TestTrimReleasesIndexAndChunks(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const total = 3*chunkLen + 10
	sec := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	for i := range total {
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: sec(i), Body: []byte("x")})
		require.NoError(t, err)
	}
	sl := s.msgs.subjects["a"]
	require.Len(t, sl.chunks, 4)

	cases := []struct {
		before    int // trim messages with Time before sec(before)
		removed   int
		chunks    int
		firstID   string
		remaining int
	}{
		{10, 10, 4, "m10", total - 10},
		{chunkLen - 1, chunkLen - 11, 4, "m" + strconv.Itoa(chunkLen-1), total - chunkLen + 1},
		{chunkLen, 1, 3, "m" + strconv.Itoa(chunkLen), total - chunkLen}, // exactly one chunk gone
		{3*chunkLen + 5, 2*chunkLen + 5, 1, "m" + strconv.Itoa(3*chunkLen+5), 5},
		{total + 1, 5, 0, "", 0},
	}
	for _, c := range cases {
		n, err := s.TrimBefore(ctx, "a", sec(c.before))
		require.NoError(t, err)
		require.Equal(t, c.removed, n, "trim before %d", c.before)
		require.Len(t, sl.chunks, c.chunks, "trim before %d", c.before)
		require.Len(t, s.msgs.byID, c.remaining, "trimmed ids leave the index")
		require.Equal(t, c.remaining, sl.n)
		if c.remaining > 0 {
			require.Equal(t, c.firstID, sl.at(0).ID)
			for _, ch := range sl.chunks[:len(sl.chunks)-1] {
				require.Len(t, ch, chunkLen, "every chunk but the last is full")
			}
		}
	}
	require.Nil(t, sl.chunks, "an emptied log drops its chunks")

	// The log carries on after being emptied.
	m, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "again", Time: sec(total + 2)})
	require.NoError(t, err)
	require.Equal(t, uint64(total+1), m.Seq)
	got, err := s.Read(ctx, "a", 0, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "again", got[0].ID)
}

func TestReadAcrossChunks(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	const total = 2*chunkLen + 100
	for i := range total {
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
	}
	for _, from := range []int{1, chunkLen - 2, chunkLen, chunkLen + 1, 2*chunkLen - 50} {
		got, err := s.Read(ctx, "a", uint64(from), chunkLen+3)
		require.NoError(t, err)
		require.Len(t, got, min(chunkLen+3, total-from+1))
		for i, m := range got {
			seq := from + i
			require.Equal(t, uint64(seq), m.Seq)
			require.Equal(t, strconv.Itoa(seq-1), string(m.Body))
		}
	}
}

func TestExpiryHeapStaysBounded(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = 100
	for i := range 10_000 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		// Every key is claimed twice over its life, so the heap also holds
		// items of replaced entries.
		key := "k" + strconv.Itoa(i/2)
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: now, IdemKey: key, IdemExpires: now.Add(time.Millisecond)})
		require.NoError(t, err)
		_, _, err = s.Append(ctx, store.Message{Subject: "b", ID: "n" + strconv.Itoa(i), Time: now, IdemKey: "u" + strconv.Itoa(i), IdemExpires: now.Add(ttl * time.Millisecond)})
		require.NoError(t, err)
		require.LessOrEqual(t, len(s.msgs.idem.expiry), 2*ttl+2)
	}
}

func TestExpiryHeapOrder(t *testing.T) {
	var h expiryHeap
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	in := []int{5, 3, 9, 1, 1, 7, 2, 8, 6, 4, 0}
	for _, d := range in {
		h.push(expiry{at: t0.Add(time.Duration(d)), key: strconv.Itoa(d)})
	}
	var got []int
	for len(h) > 0 {
		e := h.pop()
		got = append(got, int(e.at.Sub(t0)))
	}
	require.Equal(t, []int{0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got)
}
