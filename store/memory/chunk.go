package memory

import (
	"strings"
	"time"

	"pigeon/store"
)

// chunkLen is how many messages a full chunk of a subject log holds.
const chunkLen = 1024

// subjectLog is one subject's retained messages, in chunks. Every chunk but
// the last holds chunkLen messages, counting the trimmed slots at the front
// of the first; so the i-th retained message is at position head+i, found in
// O(1). A full chunk is never copied again: Append does not move old
// messages, and trimming frees whole chunks.
//
// Nothing a subjectLog holds per message is a pointer, so however many
// messages it holds the garbage collector has a few objects per chunk to
// look at, none of them to scan.
type subjectLog struct {
	name string
	// num is the log's index in messageLog.logs, what a msgLoc names.
	num    uint32
	chunks []chunk
	// head is the index in chunks[0] of the first retained message.
	head int
	// n is how many messages are retained.
	n int
	// first is the sequence of the first retained message; when none is
	// retained it is the next sequence Append assigns.
	first uint64
	// bytes is the sum of the retained messages' body lengths (see
	// store.ByteTrimmer).
	bytes uint64
	// arena is the arena capacity a new chunk starts with: the size of the
	// arena of the last chunk that filled up, plus an eighth; 0 until a
	// chunk has filled, so that a quiet subject stays small.
	arena int
	// spare is the next chunk, made ready beside the appends (spare.go).
	spare spareState
}

// chunk holds up to chunkLen messages: a fixed header each, and the bytes of
// their ids, idempotency keys and bodies one after the other in data.
type chunk struct {
	hdrs []msgHeader
	data []byte
}

// msgHeader is one message in its chunk. Its ID, IdemKey and Body are, in
// that order, the bytes of data from the end of the previous header (0 for
// the first) to end.
type msgHeader struct {
	end    int
	idLen  int
	keyLen int
	time   stamp
	expiry stamp
}

// stamp is a time.Time as two integers, which is what the chunks, the
// idempotency clock and the expiry queue keep: a time.Time holds a
// *Location the garbage collector would follow. A stamp covers every time.Time and
// orders like it, but keeps neither the location nor a monotonic reading.
type stamp struct {
	sec  int64 // since the Unix epoch
	nsec int32 // in [0, 1e9)
}

func stampOf(t time.Time) stamp { return stamp{sec: t.Unix(), nsec: int32(t.Nanosecond())} }

// time returns the instant in UTC; the zero stamp of time.Time{} gives
// time.Time{} back.
func (s stamp) time() time.Time { return time.Unix(s.sec, int64(s.nsec)).UTC() }

func (s stamp) before(u stamp) bool {
	return s.sec < u.sec || s.sec == u.sec && s.nsec < u.nsec
}

// last is the sequence of the last message appended; first-1 when every
// message has been trimmed.
func (sl *subjectLog) last() uint64 { return sl.first + uint64(sl.n) - 1 }

// at returns the chunk and index in it of the i-th retained message,
// 0 <= i < n.
func (sl *subjectLog) at(i int) (*chunk, int) {
	p := sl.head + i
	return &sl.chunks[p/chunkLen], p % chunkLen
}

// get returns the chunk and index in it of the retained message with
// sequence seq.
func (sl *subjectLog) get(seq uint64) (*chunk, int, bool) {
	if seq < sl.first || seq-sl.first >= uint64(sl.n) {
		return nil, 0, false
	}
	c, j := sl.at(int(seq - sl.first))
	return c, j, true
}

// push copies m in as the message after last(); m.Subject and m.Seq are not
// kept. A new chunk is the prepared spare when one is ready (spare.go).
func (sl *subjectLog) push(m *store.Message, sp *spares) {
	last := len(sl.chunks) - 1
	if last < 0 || len(sl.chunks[last].hdrs) == chunkLen {
		var c chunk
		full := -1
		if last >= 0 {
			full = len(sl.chunks[last].data)
		}
		if full >= 0 {
			sl.arena = full + full/8
		}
		if s, ok := sl.takeSpare(sp, sl.arena); ok {
			c = s
		} else {
			c.hdrs, c.data = newChunk[msgHeader](chunkLen, full, &sl.arena)
		}
		sl.chunks = append(sl.chunks, c)
		last++
	}
	c := &sl.chunks[last]
	c.data = append(c.data, m.ID...)
	c.data = append(c.data, m.IdemKey...)
	c.data = append(c.data, m.Body...)
	sl.bytes += uint64(len(m.Body))
	c.hdrs = append(c.hdrs, msgHeader{
		end:    len(c.data),
		idLen:  len(m.ID),
		keyLen: len(m.IdemKey),
		time:   stampOf(m.Time),
		expiry: stampOf(m.IdemExpires),
	})
	sl.n++
	sl.maybePrepare(sp)
}

// start is the offset in data of message j's bytes.
func (c *chunk) start(j int) int {
	if j == 0 {
		return 0
	}
	return c.hdrs[j-1].end
}

// id, key and body return message j's bytes, in the chunk: read them, do
// not keep or hand them out.
func (c *chunk) id(j int) []byte {
	s := c.start(j)
	return c.data[s : s+c.hdrs[j].idLen]
}

func (c *chunk) key(j int) []byte {
	s := c.start(j) + c.hdrs[j].idLen
	return c.data[s : s+c.hdrs[j].keyLen]
}

func (c *chunk) body(j int) []byte {
	h := &c.hdrs[j]
	return c.data[c.start(j)+h.idLen+h.keyLen : h.end]
}

// message returns a copy of message j, whose sequence is seq, that shares
// nothing with the chunk. id and key, when not empty, are strings the caller
// knows to be the message's own (it looked the message up by them), which
// saves copying them. An empty body comes back nil.
func (sl *subjectLog) message(c *chunk, j int, seq uint64, id, key string) store.Message {
	h := &c.hdrs[j]
	if id == "" && h.idLen > 0 {
		id = string(c.id(j))
	}
	if key == "" && h.keyLen > 0 {
		key = string(c.key(j))
	}
	var body []byte
	if b := c.body(j); len(b) > 0 {
		body = append([]byte(nil), b...)
	}
	return store.Message{
		Subject: sl.name, Seq: seq, ID: id, Time: h.time.time(),
		IdemKey: key, IdemExpires: h.expiry.time(), Body: body,
	}
}

// window copies up to limit (no limit when limit <= 0) retained messages
// with Seq >= from. The bodies share one buffer and the ids and keys one
// string, so a window costs three allocations whatever its length; each body
// is capped at its length, so appending to one cannot overwrite the next.
func (sl *subjectLog) window(from uint64, limit int) []store.Message {
	from = max(from, sl.first)
	if from-sl.first >= uint64(sl.n) {
		return nil
	}
	i0 := int(from - sl.first)
	n := sl.n - i0
	if limit > 0 && limit < n {
		n = limit
	}
	var nbody, nstr int
	for i := range n {
		c, j := sl.at(i0 + i)
		h := &c.hdrs[j]
		nstr += h.idLen + h.keyLen
		nbody += h.end - c.start(j) - h.idLen - h.keyLen
	}
	out := make([]store.Message, n)
	bodies := make([]byte, nbody)
	var strs strings.Builder
	strs.Grow(nstr)
	for i := range out {
		c, j := sl.at(i0 + i)
		h := &c.hdrs[j]
		s := c.start(j)
		strs.Write(c.data[s : s+h.idLen+h.keyLen])
		m := &out[i]
		m.Subject, m.Seq = sl.name, from+uint64(i)
		m.Time, m.IdemExpires = h.time.time(), h.expiry.time()
		if k := copy(bodies, c.body(j)); k > 0 {
			m.Body = bodies[:k:k]
			bodies = bodies[k:]
		}
	}
	all := strs.String()
	for i := range out {
		c, j := sl.at(i0 + i)
		h := &c.hdrs[j]
		out[i].ID, all = all[:h.idLen], all[h.idLen:]
		out[i].IdemKey, all = all[:h.keyLen], all[h.keyLen:]
	}
	return out
}

// dropFront removes the first k retained messages, calling gone for each
// before it goes. A chunk goes once its last message has; until then the
// bytes of its trimmed messages stay in its arena.
func (sl *subjectLog) dropFront(k int, gone func(c *chunk, j int, seq uint64)) {
	for k > 0 {
		c := &sl.chunks[0]
		end := min(len(c.hdrs), sl.head+k)
		for j := sl.head; j < end; j++ {
			gone(c, j, sl.first+uint64(j-sl.head))
			sl.bytes -= uint64(len(c.body(j)))
		}
		dropped := end - sl.head
		k -= dropped
		sl.n -= dropped
		sl.first += uint64(dropped)
		sl.head = end
		if sl.head == chunkLen || sl.n == 0 {
			sl.chunks[0] = chunk{}
			sl.chunks = sl.chunks[1:]
			sl.head = 0
		}
	}
	if len(sl.chunks) == 0 {
		sl.chunks = nil
	}
}

// newChunk returns the headers and arena of a log's next chunk, which holds
// n headers. full is how long the last full chunk's arena grew (-1 for the
// first chunk). The first chunk grows by append, so a quiet log stays
// small; every later one gets all its headers at once and an arena an
// eighth larger than the last one's, so it rarely regrows. arena keeps that
// size between calls.
func newChunk[H any](n, full int, arena *int) ([]H, []byte) {
	if full >= 0 {
		*arena = full + full/8
	}
	if *arena == 0 {
		return nil, nil
	}
	return make([]H, 0, n), make([]byte, 0, *arena)
}
