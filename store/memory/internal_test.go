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

// These tests look at what the public API cannot see: memory that must be
// let go, and the plain forms the store keeps records in.

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
		require.Equal(t, c.remaining, s.msgs.ids.len(), "trimmed ids leave the index")
		require.Equal(t, c.remaining, sl.n)
		if c.remaining > 0 {
			c0, j := sl.at(0)
			require.Equal(t, c.firstID, string(c0.id(j)))
			for _, ch := range sl.chunks[:len(sl.chunks)-1] {
				require.Len(t, ch.hdrs, chunkLen, "every chunk but the last is full")
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
		require.LessOrEqual(t, s.msgs.idem.expiry.len(), 2*ttl+2)
	}
}

func TestExpiryHeapOrder(t *testing.T) {
	var h expiryHeap
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	in := []int{5, 3, 9, 1, 1, 7, 2, 8, 6, 4, 0}
	for _, d := range in {
		h.push(newExpiry(stampOf(t0.Add(time.Duration(d))), uint64(d), msgLoc{}))
	}
	var got []int
	for len(h) > 0 {
		e := h.pop()
		got = append(got, int(e.at().time().Sub(t0)))
	}
	require.Equal(t, []int{0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got)
}

func TestExpiryQueue(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d int) stamp { return stampOf(t0.Add(time.Duration(d) * time.Second)) }
	var q expiryQueue
	// In order, with a few late ones, over several FIFO chunks.
	const n = 3*fifoChunk + 7
	for i := range n {
		d := i
		if i%100 == 99 {
			d = i - 50 // late: goes to the heap
		}
		q.push(newExpiry(at(d), uint64(i), msgLoc{}))
	}
	require.Equal(t, n, q.len())
	require.Equal(t, n/100, len(q.heap))
	require.Equal(t, (n-n/100+fifoChunk-1)/fifoChunk, len(q.fifo.chunks))

	popped := map[uint64]bool{}
	prev := at(-1)
	for _, cut := range []int{-1, 0, 10, fifoChunk, 2 * fifoChunk, n} {
		for {
			e, ok := q.popDue(at(cut))
			if !ok {
				break
			}
			require.False(t, at(cut).before(e.at()), "popped %v before its time", e.at().time())
			require.False(t, e.at().before(prev), "popped %v after %v", e.at().time(), prev.time())
			prev = e.at()
			popped[e.hash] = true
		}
		for i := range n {
			d := i
			if i%100 == 99 {
				d = i - 50
			}
			require.Equal(t, d <= cut, popped[uint64(i)], "item %d at %d, cut %d", i, d, cut)
		}
		require.LessOrEqual(t, len(q.fifo.chunks), (n-cut)/fifoChunk+2, "popped chunks go")
	}
	require.Zero(t, q.len())
	require.Equal(t, 1, len(q.fifo.chunks), "an emptied FIFO keeps one chunk for the next push")
	q.push(newExpiry(at(1), 0, msgLoc{}))
	e, ok := q.popDue(at(1))
	require.True(t, ok)
	require.Equal(t, at(1), e.at())
}

func TestStamp(t *testing.T) {
	times := []time.Time{
		{},
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(1500, 6, 1, 12, 0, 0, 999_999_999, time.UTC), // before UnixNano's range
		time.Date(1969, 12, 31, 23, 59, 59, 500_000_000, time.UTC),
		time.Unix(0, 0),
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.FixedZone("X", 3600)),
		time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Now(), // monotonic reading, local zone
		time.Date(3000, 1, 1, 0, 0, 0, 1, time.UTC), // after UnixNano's range
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	}
	for i, a := range times {
		got := stampOf(a).time()
		require.True(t, got.Equal(a), "%v came back as %v", a, got)
		require.Equal(t, time.UTC, got.Location())
		for _, b := range times {
			require.Equal(t, a.Before(b), stampOf(a).before(stampOf(b)), "%v before %v", a, b)
		}
		if i == 0 {
			require.Equal(t, time.Time{}, got, "the zero time comes back as the zero time")
		}
	}
}

func TestChunkArena(t *testing.T) {
	s := New(nil)
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	body := make([]byte, 100)
	for i := range 2*chunkLen + 1 {
		m := store.Message{Subject: "a", ID: "m" + strconv.Itoa(i%10), Time: t0, Body: body}
		switch i % 4 { // every field empty in turn
		case 1:
			m.ID = ""
		case 2:
			m.IdemKey, m.IdemExpires = "k"+strconv.Itoa(i), t0.Add(time.Hour)
		case 3:
			m.Body = nil
		}
		_, _, err := s.Append(ctx, m)
		require.NoError(t, err)
	}
	sl := s.msgs.subjects["a"]
	require.Len(t, sl.chunks, 3)
	first, second := sl.chunks[0], sl.chunks[1]
	require.Equal(t, withSlack(first.used()), cap(second.data), "a new chunk's arena is sized from the last full one")
	require.Equal(t, withSlack(second.used()), sl.arenaSize, "and so is the next one's, unless a spare made meanwhile holds enough")

	got, err := s.Read(ctx, "a", 0, 0)
	require.NoError(t, err)
	for i, m := range got {
		require.Equal(t, uint64(i+1), m.Seq)
		require.Equal(t, "a", m.Subject)
		require.Equal(t, i%4 == 1, m.ID == "", "id of %d", i)
		require.Equal(t, i%4 == 2, m.IdemKey != "", "key of %d", i)
		require.Equal(t, i%4 == 2, !m.IdemExpires.IsZero(), "expiry of %d", i)
		if i%4 == 3 {
			require.Nil(t, m.Body, "an empty body comes back nil")
		} else {
			require.Equal(t, body, m.Body)
		}
	}
}

func TestKeptCopiesAreDropped(t *testing.T) {
	s := New(&Options{IdempotencyGrace: 10 * time.Second})
	ctx := t.Context()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	for i := range 10 { // k<i> at i s, expiring a minute later
		_, _, err := s.Append(ctx, store.Message{Subject: "a", ID: "m" + strconv.Itoa(i), Time: at(i), IdemKey: "k" + strconv.Itoa(i), IdemExpires: at(i + 60)})
		require.NoError(t, err)
	}
	n, err := s.TrimBefore(ctx, "a", at(3600))
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Len(t, s.msgs.idem.kept, 10, "live keys keep their trimmed messages")

	_, _, err = s.Append(ctx, store.Message{Subject: "a", ID: "late", Time: at(75)})
	require.NoError(t, err)
	require.Len(t, s.msgs.idem.kept, 4, "keys evicted at 75s less grace drop their copies")
	got, dup, err := s.Append(ctx, store.Message{Subject: "b", ID: "x", Time: at(67), IdemKey: "k8", IdemExpires: at(3600)})
	require.NoError(t, err)
	require.True(t, dup, "k8 expires at 68s")
	require.Equal(t, "m8", got.ID)
	_, dup, err = s.Append(ctx, store.Message{Subject: "b", ID: "y", Time: at(70), IdemKey: "k9", IdemExpires: at(3600)})
	require.NoError(t, err)
	require.False(t, dup, "k9 expired at 69s")
	require.Len(t, s.msgs.idem.kept, 3, "a key claimed again drops its old copy")
}

// TestLongIDsAndKeys: a message whose id or key's rest is longLen bytes or
// longer keeps their lengths in its bytes rather than its header, and
// reads back, deduplicates and is trimmed as any other.
func TestLongIDsAndKeys(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{longLen - 1, longLen, longLen + 1} {
		for _, long := range []string{"id", "key"} {
			t.Run(fmt.Sprintf("%s of %d", long, n), func(t *testing.T) {
				s := New(nil)
				ctx := t.Context()
				id, key := "m", "a\x00p\x00k"
				if long == "id" {
					id = strings.Repeat("i", n)
				} else {
					key = "a\x00p\x00" + strings.Repeat("k", n)
				}
				body := []byte("body")
				msgs := []store.Message{
					{Subject: "a", ID: "before", Time: t0, Body: body},
					{Subject: "a", ID: id, Time: t0, IdemKey: key, IdemExpires: t0.Add(time.Hour), Body: body},
					{Subject: "a", ID: "after", Time: t0.Add(time.Second), IdemKey: "a\x00p\x00k2", IdemExpires: t0.Add(time.Hour), Body: body},
				}
				for _, m := range msgs {
					_, _, err := s.Append(ctx, m)
					require.NoError(t, err)
				}
				sl := s.msgs.subjects["a"]
				require.Equal(t, n >= longLen, sl.chunks[0].hdrs[1].idLen == longLen, "the lengths are in the header unless one is too long")
				got, err := s.Read(ctx, "a", 0, 0)
				require.NoError(t, err)
				require.Len(t, got, 3)
				for i, m := range msgs {
					require.Equal(t, m.ID, got[i].ID)
					require.Equal(t, m.IdemKey, got[i].IdemKey)
					require.Equal(t, m.Body, got[i].Body)
				}
				m, err := s.Lookup(ctx, id)
				require.NoError(t, err)
				require.Equal(t, key, m.IdemKey)
				_, err = s.TrimBefore(ctx, "a", t0.Add(time.Second))
				require.NoError(t, err)
				orig, dup, err := s.Append(ctx, store.Message{Subject: "a", ID: "again", Time: t0, IdemKey: key, IdemExpires: t0.Add(time.Hour)})
				require.NoError(t, err)
				require.True(t, dup, "the trimmed message's key still deduplicates")
				require.Equal(t, id, orig.ID)
				require.Equal(t, body, orig.Body)
			})
		}
	}
}
