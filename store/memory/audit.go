package memory

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"pigeon/store"
)

// AppendAudit appends recs, which must continue the log: the first has Seq
// one past the last record's (1 on an empty log) and each next one more. A
// batch that breaks the sequence anywhere is refused whole. The hash chain is
// the caller's; it is not checked here.
func (s *Store) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	if err := s.checkClosed(); err != nil {
		return err
	}
	want := uint64(s.audit.n) + 1
	for i := range recs {
		if recs[i].Seq != want+uint64(i) {
			return fmt.Errorf("memory: audit record seq %d does not continue the log, want %d", recs[i].Seq, want+uint64(i))
		}
	}
	for i := range recs {
		s.audit.push(&recs[i])
	}
	return nil
}

// ReadAudit returns up to limit records (no limit when limit <= 0) with
// Seq >= from, in order. Their Time is in UTC, with no monotonic reading.
func (s *Store) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.auditMu.RLock()
	defer s.auditMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return nil, err
	}
	// Records start at Seq 1: the i-th record has Seq i+1.
	from = max(from, 1)
	if from > uint64(s.audit.n) {
		return nil, nil
	}
	n := s.audit.n - int(from-1)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]store.AuditRecord, n)
	s.audit.read(int(from-1), out)
	return out, nil
}

// AuditHead returns the last record (zero when empty) and a zero Checkpoint:
// this store never trims the audit log.
func (s *Store) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	s.auditMu.RLock()
	defer s.auditMu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.AuditRecord{}, store.Checkpoint{}, err
	}
	if s.audit.n == 0 {
		return store.AuditRecord{}, store.Checkpoint{}, nil
	}
	var last [1]store.AuditRecord
	s.audit.read(s.audit.n-1, last[:])
	return last[0], store.Checkpoint{}, nil
}

// auditChunkLen is how many records one chunk of the audit log holds: the
// log grows by chunks, never by copying what it already holds.
const auditChunkLen = 4096

// auditLog is the audit log, kept the way a subject log keeps messages (see
// chunk.go): chunks of fixed headers that hold no pointers, and a byte arena
// per chunk. However many records it holds, the garbage collector has a few
// objects per chunk to look at, none of them to scan, and one string per
// distinct interned value.
//
// A record's Seq is its index plus one. Its low-cardinality fields, Type to
// SchemaID, are numbers in a table of the distinct strings the log has
// seen, and those nine numbers, which records mostly repeat, one number in
// a table of the distinct combinations (its shape); its Time is a stamp.
// Its ID, MessageID, Ref, PrevHash and Hash are bytes in the arena, except
// in cases that are recognised exactly and cost less:
// an ID of "aud_" and the Seq in decimal, the broker's, is a flag; a PrevHash
// equal to the previous record's Hash (to store.Genesis for the first
// record) is a flag; a PrevHash or Hash of 64 lowercase hex digits is its 32
// bytes. Anything else is kept as it came, so every record reads back equal
// (Time in UTC). Reads rebuild the strings that are not interned, so a
// ReadAudit copies about a hundred bytes per broker record.
type auditLog struct {
	chunks []auditChunk
	n      int
	// arenaSize is the arena capacity a new chunk starts with, as in
	// subjectLog.
	arenaSize int

	// strs are the distinct values of the interned fields, numbered by
	// their index; strs[0] is "". ids maps each to its number.
	strs []string
	ids  map[string]uint32
	// last holds, for each interned field, the number of its last value
	// other than "": a record mostly repeats the previous one's values, and
	// comparing with it costs less than a map lookup.
	last [auditInterned]uint32
	// shapes are the distinct combinations of interned fields, numbered
	// by their index; shapeIDs maps each to its number, and lastShape is
	// the last record's.
	shapes    []auditShape
	shapeIDs  map[auditShape]uint32
	lastShape uint32

	// hash is the last record's Hash when it has at most len(hash) bytes,
	// hashLen of them; hashLen is -1 when it is longer.
	hash    [64]byte
	hashLen int
}

// auditInterned is how many fields of a record are interned: Type, Outcome,
// Code, Gate, Subject, Principal, ContractID, PolicyID and SchemaID, in that
// order in an auditShape.
const auditInterned = 9

// auditShape is the numbers of a record's interned fields.
type auditShape [auditInterned]uint32

// auditChunk holds up to auditChunkLen records: a header each, and their
// bytes one after the other in its arena.
type auditChunk struct {
	hdrs []auditHeader
	arena
}

// auditHeader is one record in its chunk: where its bytes end in the arena
// (arena.item), its Time (the sec and nsec of a stamp), its shape and its
// flags. Its bytes are ID (unless auditSeqID), MessageID, Ref, PrevHash
// (unless auditPrevSame) and Hash, each a uvarint length and the string, or
// 32 bytes for a PrevHash or Hash held as hex.
type auditHeader struct {
	end   int
	sec   int64
	nsec  int32
	shape uint32
	flags uint8
}

// The flags of an auditHeader.
const (
	auditSeqID    = 1 << iota // ID is auditIDPrefix and the Seq: no bytes
	auditPrevSame             // PrevHash is the previous record's Hash: no bytes
	auditPrevHex              // PrevHash is 64 lowercase hex digits: 32 bytes
	auditHashHex              // Hash is 64 lowercase hex digits: 32 bytes
	auditBatch                // Seqs, Count and Digest follow Hash
)

// auditIDPrefix starts the ids the broker gives its records.
const auditIDPrefix = "aud_"

// push copies r in as the record after the last; r.Seq is the log's next.
func (l *auditLog) push(r *store.AuditRecord) {
	last := len(l.chunks) - 1
	if last < 0 || len(l.chunks[last].hdrs) == auditChunkLen {
		var c auditChunk
		full := -1
		if last >= 0 {
			full = l.chunks[last].used()
		}
		c.hdrs, c.arena = newChunk[auditHeader](auditChunkLen, full, &l.arenaSize)
		// The log only grows, and its chunk fills: its pages are faulted
		// in at once (touch), which costs less than one fault per page
		// as the records are appended. A subject log's chunk is made
		// ready so beside the appends (spare.go) instead.
		touch(c.hdrs, cap(c.hdrs))
		touch(c.data, cap(c.data)-cap(c.data)/(arenaSlack+1))
		if l.strs == nil {
			l.strs = []string{""}
			l.ids = make(map[string]uint32)
			l.shapeIDs = make(map[auditShape]uint32)
		}
		l.chunks = append(l.chunks, c)
		last++
	}
	c := &l.chunks[last]
	t := stampOf(r.Time)
	h := auditHeader{sec: t.sec, nsec: t.nsec}
	dp := c.room(len(c.hdrs), auditChunkLen, maxAuditBytes(r))
	d := *dp
	if isSeqID(r.ID, uint64(l.n)+1) {
		h.flags |= auditSeqID
	} else {
		d = appendString(d, r.ID)
	}
	d = appendString(d, r.MessageID)
	d = appendString(d, r.Ref)
	var ok bool
	if l.lastHashIs(r.PrevHash) {
		h.flags |= auditPrevSame
	} else if d, ok = appendHex(d, r.PrevHash); ok {
		h.flags |= auditPrevHex
	} else {
		d = appendString(d, r.PrevHash)
	}
	if d, ok = appendHex(d, r.Hash); ok {
		h.flags |= auditHashHex
	} else {
		d = appendString(d, r.Hash)
	}
	if r.Seqs != "" || r.Count != 0 || r.Digest != "" {
		h.flags |= auditBatch
		d = appendString(d, r.Seqs)
		d = binary.AppendVarint(d, int64(r.Count))
		d = appendString(d, r.Digest)
	}
	h.end = len(d)
	*dp = d
	h.shape = l.shape(&auditShape{
		l.intern(0, r.Type), l.intern(1, r.Outcome), l.intern(2, r.Code),
		l.intern(3, r.Gate), l.intern(4, r.Subject), l.intern(5, r.Principal),
		l.intern(6, r.ContractID), l.intern(7, r.PolicyID), l.intern(8, r.SchemaID),
	})
	c.hdrs = append(c.hdrs, h)
	l.n++
	l.hashLen = -1
	if len(r.Hash) <= len(l.hash) {
		l.hashLen = copy(l.hash[:], r.Hash)
	}
}

// maxAuditBytes is the most arena bytes push writes for r.
func maxAuditBytes(r *store.AuditRecord) int {
	const lengths = 8 * binary.MaxVarintLen64 // of the strings, and Count
	return len(r.ID) + len(r.MessageID) + len(r.Ref) + len(r.PrevHash) + len(r.Hash) + len(r.Seqs) + len(r.Digest) + lengths
}

// lastHashIs tells whether s is the last record's Hash, or store.Genesis
// when the log is empty.
func (l *auditLog) lastHashIs(s string) bool {
	if l.n == 0 {
		return s == store.Genesis
	}
	return l.hashLen >= 0 && s == string(l.hash[:l.hashLen])
}

// intern returns the number of s, a value of interned field f, adding a
// copy of s to the table when it is new.
func (l *auditLog) intern(f int, s string) uint32 {
	if s == "" {
		return 0
	}
	if id := l.last[f]; id != 0 && l.strs[id] == s {
		return id
	}
	id, ok := l.ids[s]
	if !ok {
		if uint64(len(l.strs)) > math.MaxUint32 {
			panic("memory: more than 2^32-1 distinct audit field values")
		}
		id = uint32(len(l.strs))
		s = strings.Clone(s) // not the caller's, which may hold more
		l.strs = append(l.strs, s)
		l.ids[s] = id
	}
	l.last[f] = id
	return id
}

// shape returns the number of v, adding it to the table when it is new.
func (l *auditLog) shape(v *auditShape) uint32 {
	if len(l.shapes) > 0 && l.shapes[l.lastShape] == *v {
		return l.lastShape
	}
	id, ok := l.shapeIDs[*v]
	if !ok {
		if uint64(len(l.shapes)) > math.MaxUint32 {
			panic("memory: more than 2^32 distinct audit shapes")
		}
		id = uint32(len(l.shapes))
		l.shapes = append(l.shapes, *v)
		l.shapeIDs[*v] = id
	}
	l.lastShape = id
	return id
}

// isSeqID tells whether id is auditIDPrefix and seq in decimal.
func isSeqID(id string, seq uint64) bool {
	var buf [20]byte
	d := strconv.AppendUint(buf[:0], seq, 10)
	return len(id) == len(auditIDPrefix)+len(d) && id[:len(auditIDPrefix)] == auditIDPrefix && id[len(auditIDPrefix):] == string(d)
}

func appendString(d []byte, s string) []byte {
	d = binary.AppendUvarint(d, uint64(len(s)))
	return append(d, s...)
}

// appendHex appends the 32 bytes that s stands for when s is 64 lowercase
// hex digits, and tells whether it is; otherwise d comes back unchanged.
// (hex.Decode would take upper case too, which would not read back equal.)
func appendHex(d []byte, s string) ([]byte, bool) {
	if len(s) != 64 {
		return d, false
	}
	var raw [32]byte
	for i := range raw {
		hi, lo := unhex[s[2*i]], unhex[s[2*i+1]]
		if hi|lo > 0xf {
			return d, false
		}
		raw[i] = hi<<4 | lo
	}
	return append(d, raw[:]...), true
}

// unhex is the value of each lowercase hex digit, and 0xff for every other
// byte.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := byte('0'); c <= '9'; c++ {
		t[c] = c - '0'
	}
	for c := byte('a'); c <= 'f'; c++ {
		t[c] = c - 'a' + 10
	}
	return t
}()

// at returns the chunk and index in it of the i-th record.
func (l *auditLog) at(i int) (*auditChunk, int) {
	return &l.chunks[i/auditChunkLen], i % auditChunkLen
}

// auditBytes are the arena bytes of one record's strings: read them, do not
// keep or hand them out. id is nil under auditSeqID and prev under
// auditPrevSame; prev and hash are 32 raw bytes under auditPrevHex and
// auditHashHex.
type auditBytes struct {
	id, msg, ref, prev, hash []byte
	seqs, digest             []byte // under auditBatch
	count                    int
}

// bytes returns the arena bytes of record j.
func (c *auditChunk) bytes(j int) (p auditBytes) {
	h := &c.hdrs[j]
	b := c.item(j, c.prevEnd(j), h.end)
	if h.flags&auditSeqID == 0 {
		p.id, b = cut(b)
	}
	p.msg, b = cut(b)
	p.ref, b = cut(b)
	switch {
	case h.flags&auditPrevSame != 0:
	case h.flags&auditPrevHex != 0:
		p.prev, b = b[:32], b[32:]
	default:
		p.prev, b = cut(b)
	}
	if h.flags&auditHashHex != 0 {
		p.hash, b = b[:32], b[32:]
	} else {
		p.hash, b = cut(b)
	}
	if h.flags&auditBatch != 0 {
		p.seqs, b = cut(b)
		n, k := binary.Varint(b)
		p.count = int(n)
		p.digest, _ = cut(b[k:])
	}
	return p
}

// prevEnd is where record j-1's bytes end, for arena.item.
func (c *auditChunk) prevEnd(j int) int {
	if j == 0 {
		return 0
	}
	return c.hdrs[j-1].end
}

// cut splits off the uvarint-prefixed string at the start of b.
func cut(b []byte) (s, rest []byte) {
	n, k := binary.Uvarint(b)
	end := k + int(n)
	return b[k:end], b[end:]
}

// hexLen is the length of the string whose bytes are b: twice len(b) when
// flags has flag, which says b is the string's value as hex digits.
func hexLen(flags, flag uint8, b []byte) int {
	if flags&flag != 0 {
		return 2 * len(b)
	}
	return len(b)
}

// writeHex writes the string whose bytes are b (see hexLen).
func writeHex(sb *strings.Builder, flags, flag uint8, b []byte) {
	if flags&flag == 0 {
		sb.Write(b)
		return
	}
	var x [64]byte
	hex.Encode(x[:], b)
	sb.Write(x[:])
}

// read fills out with copies of the records from the i0-th on. Their
// interned fields are the table's strings; all their other strings share
// one allocation, and a PrevHash that is the previous record's Hash is that
// very string.
func (l *auditLog) read(i0 int, out []store.AuditRecord) {
	if len(out) == 0 {
		return
	}
	// prevOfFirst is whether the first record's PrevHash is the Hash of a
	// record not in out, which is then written first.
	c0, j0 := l.at(i0)
	prevOfFirst := i0 > 0 && c0.hdrs[j0].flags&auditPrevSame != 0
	var pc *auditChunk
	var pj int
	size := 0
	if prevOfFirst {
		pc, pj = l.at(i0 - 1)
		size += hexLen(pc.hdrs[pj].flags, auditHashHex, pc.bytes(pj).hash)
	}
	// At most what the arena holds, hex digits counted twice; the lengths
	// are a few bytes too many.
	for i := range out {
		c, j := l.at(i0 + i)
		h := &c.hdrs[j]
		size += len(c.item(j, c.prevEnd(j), h.end))
		if h.flags&auditSeqID != 0 {
			size += len(auditIDPrefix) + decimalLen(uint64(i0+i+1))
		}
		if h.flags&auditPrevHex != 0 {
			size += 32
		}
		if h.flags&auditHashHex != 0 {
			size += 32
		}
	}

	var sb strings.Builder
	sb.Grow(size)
	if prevOfFirst {
		writeHex(&sb, pc.hdrs[pj].flags, auditHashHex, pc.bytes(pj).hash)
	}
	var num [20]byte
	for i := range out {
		c, j := l.at(i0 + i)
		h, p := &c.hdrs[j], c.bytes(j)
		if h.flags&auditSeqID != 0 {
			sb.WriteString(auditIDPrefix)
			sb.Write(strconv.AppendUint(num[:0], uint64(i0+i+1), 10))
		}
		sb.Write(p.id)
		sb.Write(p.msg)
		sb.Write(p.ref)
		writeHex(&sb, h.flags, auditPrevHex, p.prev)
		writeHex(&sb, h.flags, auditHashHex, p.hash)
		sb.Write(p.seqs)
		sb.Write(p.digest)
	}

	all := sb.String()
	take := func(n int) (s string) {
		s, all = all[:n], all[n:]
		return s
	}
	var prevHash string
	switch {
	case prevOfFirst:
		prevHash = take(hexLen(pc.hdrs[pj].flags, auditHashHex, pc.bytes(pj).hash))
	case i0 == 0:
		prevHash = store.Genesis
	}
	for i := range out {
		c, j := l.at(i0 + i)
		h, p := &c.hdrs[j], c.bytes(j)
		seq := uint64(i0 + i + 1)
		r := &out[i]
		r.Seq = seq
		if h.flags&auditSeqID != 0 {
			r.ID = take(len(auditIDPrefix) + decimalLen(seq))
		} else {
			r.ID = take(len(p.id))
		}
		r.Time = stamp{sec: h.sec, nsec: h.nsec}.time()
		v := &l.shapes[h.shape]
		r.Type, r.Outcome, r.Code = l.strs[v[0]], l.strs[v[1]], l.strs[v[2]]
		r.Gate, r.Subject, r.Principal = l.strs[v[3]], l.strs[v[4]], l.strs[v[5]]
		r.ContractID, r.PolicyID, r.SchemaID = l.strs[v[6]], l.strs[v[7]], l.strs[v[8]]
		r.MessageID = take(len(p.msg))
		r.Ref = take(len(p.ref))
		if h.flags&auditPrevSame != 0 {
			r.PrevHash = prevHash
		} else {
			r.PrevHash = take(hexLen(h.flags, auditPrevHex, p.prev))
		}
		r.Hash = take(hexLen(h.flags, auditHashHex, p.hash))
		r.Seqs, r.Count, r.Digest = take(len(p.seqs)), p.count, take(len(p.digest))
		prevHash = r.Hash
	}
}

// decimalLen is how many digits x has in decimal.
func decimalLen(x uint64) int {
	n := 1
	for ; x >= 10; x /= 10 {
		n++
	}
	return n
}
