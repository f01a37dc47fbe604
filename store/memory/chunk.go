package memory

import (
	"encoding/binary"
	"time"
	"unsafe"

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
	// arenaSize is the arena capacity a new chunk starts with: the bytes of
	// the last chunk that filled up, plus 1/arenaSlack; 0 until a chunk
	// has filled, so that a quiet subject stays small.
	arenaSize int
	// spare is the next chunk, made ready beside the appends (spare.go).
	spare spareState
	// scopes is the store's table of key scopes, and scope the scope of
	// the last key appended that had one.
	scopes *keyScopes
	scope  uint32
}

// chunk holds up to chunkLen messages: a fixed header each, and the bytes of
// their ids, idempotency keys and bodies one after the other in its arena.
type chunk struct {
	hdrs []msgHeader
	arena
}

// msgHeader is one message in its chunk: where its bytes end in the arena
// (arena.item), its Time and IdemExpires (the sec and nsec of a stamp
// each), the scope of its IdemKey (keyScopes), and the lengths of its ID
// and of the rest of its key after the scope. Its bytes are the ID, the
// key's rest and the Body; when either length is longLen or more, idLen
// and restLen are longLen and the bytes start with the two lengths as
// uvarints.
type msgHeader struct {
	end            int
	sec, expSec    int64
	nsec, expNsec  int32
	scope          uint32
	idLen, restLen uint16
}

// longLen marks the lengths of a message whose ID or key is that long or
// longer (msgHeader).
const longLen = 1<<16 - 1

func (h *msgHeader) time() stamp   { return stamp{sec: h.sec, nsec: h.nsec} }
func (h *msgHeader) expiry() stamp { return stamp{sec: h.expSec, nsec: h.expNsec} }

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
			full = sl.chunks[last].used()
		}
		if full >= 0 {
			sl.arenaSize = withSlack(full)
		}
		if s, ok := sl.takeSpare(sp, full); ok {
			c = s
		} else {
			c.hdrs, c.arena = newChunk[msgHeader](chunkLen, full, &sl.arenaSize)
		}
		sl.chunks = append(sl.chunks, c)
		last++
	}
	c := &sl.chunks[last]
	scope, rest := uint32(0), m.IdemKey
	if rest != "" {
		scope, rest = sl.scopes.split(rest, &sl.scope)
	}
	h := msgHeader{scope: scope, idLen: uint16(len(m.ID)), restLen: uint16(len(rest))}
	n := len(m.ID) + len(rest) + len(m.Body)
	long := len(m.ID) >= longLen || len(rest) >= longLen
	if long {
		h.idLen, h.restLen = longLen, longLen
		n += 2 * binary.MaxVarintLen64
	}
	d := c.room(len(c.hdrs), chunkLen, n)
	if long {
		*d = binary.AppendUvarint(*d, uint64(len(m.ID)))
		*d = binary.AppendUvarint(*d, uint64(len(rest)))
	}
	*d = append(*d, m.ID...)
	*d = append(*d, rest...)
	*d = append(*d, m.Body...)
	sl.bytes += uint64(len(m.Body))
	t, e := stampOf(m.Time), stampOf(m.IdemExpires)
	h.end, h.sec, h.nsec, h.expSec, h.expNsec = len(*d), t.sec, t.nsec, e.sec, e.nsec
	c.hdrs = append(c.hdrs, h)
	sl.n++
	sl.maybePrepare(sp)
}

// msgBytes are a message's bytes in its chunk: its ID, the rest of its
// IdemKey after the scope, and its Body. Read them, do not keep or hand
// them out.
type msgBytes struct{ id, rest, body []byte }

// bytes returns message j's bytes.
func (c *chunk) bytes(j int) msgBytes {
	prev := 0
	if j > 0 {
		prev = c.hdrs[j-1].end
	}
	h := &c.hdrs[j]
	b := c.item(j, prev, h.end)
	n, k := int(h.idLen), int(h.restLen)
	if n == longLen {
		return longBytes(b)
	}
	return msgBytes{id: b[:n], rest: b[n : n+k], body: b[n+k:]}
}

// size is how many bytes message j takes in the arena.
func (c *chunk) size(j int) int {
	if j == 0 || c.spill != nil && j == c.spillAt {
		return c.hdrs[j].end
	}
	return c.hdrs[j].end - c.hdrs[j-1].end
}

// longBytes is chunk.bytes for a message with long lengths: its bytes, b,
// start with them.
func longBytes(b []byte) msgBytes {
	n, w := binary.Uvarint(b)
	b = b[w:]
	k, w := binary.Uvarint(b)
	b = b[w:]
	return msgBytes{id: b[:n], rest: b[n : n+k], body: b[n+k:]}
}

func (c *chunk) id(j int) []byte   { return c.bytes(j).id }
func (c *chunk) body(j int) []byte { return c.bytes(j).body }

// hasKey tells whether message j has an IdemKey.
func (c *chunk) hasKey(j int) bool { return c.hdrs[j].scope != 0 || len(c.bytes(j).rest) > 0 }

// keyIs tells whether message j of c has the IdemKey key.
func (sl *subjectLog) keyIs(c *chunk, j int, key string) bool {
	scope, rest := sl.scopes.strs[c.hdrs[j].scope], c.bytes(j).rest
	return len(key) == len(scope)+len(rest) && key[:len(scope)] == scope && key[len(scope):] == string(rest)
}

// key returns message j's IdemKey, "" when it has none: a string of its
// own, or the table's scope when the key is its scope alone.
func (sl *subjectLog) key(c *chunk, j int) string {
	scope, rest := sl.scopes.strs[c.hdrs[j].scope], c.bytes(j).rest
	if len(rest) == 0 {
		return scope
	}
	return scope + string(rest)
}

// message returns a copy of message j, whose sequence is seq, that shares
// nothing with the chunk. id and key, when not empty, are strings the caller
// knows to be the message's own (it looked the message up by them), which
// saves copying them. An empty body comes back nil.
func (sl *subjectLog) message(c *chunk, j int, seq uint64, id, key string) store.Message {
	h, b := &c.hdrs[j], c.bytes(j)
	if id == "" && len(b.id) > 0 {
		id = string(b.id)
	}
	if key == "" {
		key = sl.key(c, j)
	}
	var body []byte
	if len(b.body) > 0 {
		body = append([]byte(nil), b.body...)
	}
	return store.Message{
		Subject: sl.name, Seq: seq, ID: id, Time: h.time().time(),
		IdemKey: key, IdemExpires: h.expiry().time(), Body: body,
	}
}

// window copies up to limit (no limit when limit <= 0) retained messages
// with Seq >= from. The bodies share one buffer and the ids and keys
// another, never written again once a string is made of its bytes, so a
// window costs three allocations whatever its length; each body is capped
// at its length, so appending to one cannot overwrite the next. A key that
// is its scope alone is the table's string.
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
	for i := range n { // from the headers alone, unless a message's lengths are long
		c, j := sl.at(i0 + i)
		h := &c.hdrs[j]
		id, rest, body := int(h.idLen), int(h.restLen), c.size(j)-int(h.idLen)-int(h.restLen)
		if id == longLen {
			b := c.bytes(j)
			id, rest, body = len(b.id), len(b.rest), len(b.body)
		}
		nstr += id
		if rest > 0 {
			nstr += len(sl.scopes.strs[h.scope]) + rest
		}
		nbody += body
	}
	out := make([]store.Message, n)
	bodies := make([]byte, nbody)
	strs := make([]byte, nstr)
	for i := range out {
		c, j := sl.at(i0 + i)
		h, b := &c.hdrs[j], c.bytes(j)
		m := &out[i]
		m.Subject, m.Seq = sl.name, from+uint64(i)
		m.Time, m.IdemExpires = h.time().time(), h.expiry().time()
		if k := copy(strs, b.id); k > 0 {
			m.ID = unsafe.String(&strs[0], k)
			strs = strs[k:]
		}
		scope := sl.scopes.strs[h.scope]
		if len(b.rest) == 0 {
			m.IdemKey = scope
		} else {
			k := copy(strs, scope)
			k += copy(strs[k:], b.rest)
			m.IdemKey = unsafe.String(&strs[0], k)
			strs = strs[k:]
		}
		if k := copy(bodies, b.body); k > 0 {
			m.Body = bodies[:k:k]
			bodies = bodies[k:]
		}
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
