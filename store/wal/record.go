package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"pigeon/store"
)

// Every entry this package writes into a tidwall/wal log (or a snapshot
// file) is one record:
//
//	crc32c uint32 little-endian, over every byte after it
//	kind   byte
//	fields kind-specific, see the encode* functions
//
// tidwall/wal frames each entry as uvarint(len) + bytes; the checksum is ours.
const recHeader = 5

// Record kinds. Numbers are part of the on-disk format: never reuse one.
const (
	kindMessage      byte = 1  // messages/<subject>/
	kindAudit        byte = 2  // audit/
	kindAccepted     byte = 4  // messages/<subject>/: a message and its acceptance audit record
	kindKept         byte = 5  // kept/: a trimmed message kept for its live idempotency claim
	kindCheckpoint   byte = 3  // audit.checkpoint
	kindDone         byte = 10 // meta/: progress MarkDone
	kindAttempt      byte = 11 // meta/: progress MarkAttempt
	kindGroupState   byte = 12 // meta snapshot: one group's whole state
	kindGroupsPruned byte = 13 // meta/: PruneGroups
	kindFloor        byte = 14 // meta/: progress RaiseFloor
	kindLowerAttempt byte = 15 // meta/: progress LowerAttempt, applied only if the attempt recorded is the one read
	kindContract     byte = 20 // meta/: PutContract
	kindContractGC   byte = 21 // meta/: DeleteExpiredContracts
	kindKVPut        byte = 30 // meta/
	kindKVDelete     byte = 31 // meta/
	kindKVSwap       byte = 32 // meta/: Swap, applied only if the key holds the old value
	kindSnapshot     byte = 40 // meta.snapshot header: covers meta index N
	kindQuarantine   byte = 50 // quarantine/: PutQuarantine
	kindQuarantineT  byte = 51 // quarantine/: TrimQuarantineBefore tombstone
	kindSubject      byte = 60 // messages/<subject>/SUBJECT
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errShort is the decoder's sticky error.
var errShort = errors.New("record too short or malformed")

// enc builds a record at the end of b, from start. Call finish to fill in
// the checksum.
type enc struct {
	b     []byte
	start int
}

func newEnc(kind byte, sizeHint int) *enc {
	e := &enc{b: make([]byte, recHeader, recHeader+sizeHint)}
	e.b[4] = kind
	return e
}

// appendEnc starts a record at the end of dst.
func appendEnc(dst []byte, kind byte) enc {
	return enc{b: append(dst, 0, 0, 0, 0, kind), start: len(dst)}
}

// recBuf is a pooled buffer that message and audit records are encoded in.
// WriteBatch copies records, so the buffer is free again once its request
// is committed or failed.
type recBuf struct {
	b     []byte
	chain bool // from chainBufs
}

// recBufs hold the buffers of single records and small batches;
// chainBufs those of the accept flusher's batches (chainLocked), a few
// hundred kilobytes each, which would otherwise be grown anew whenever a
// message's buffer came out of the pool instead.
var (
	recBufs   = sync.Pool{New: func() any { return new(recBuf) }}
	chainBufs = sync.Pool{New: func() any { return &recBuf{chain: true} }}
)

// maxPooledRec and maxPooledChain are the largest buffers kept for reuse.
const (
	maxPooledRec   = 256 << 10
	maxPooledChain = 4 << 20
)

func getRecBuf() *recBuf { return recBufs.Get().(*recBuf) }

// getChainBuf returns an empty buffer of at least size bytes for a batch
// of audit records.
func getChainBuf(size int) *recBuf {
	p := chainBufs.Get().(*recBuf)
	p.grow(size)
	return p
}

// grow makes room for n more bytes at once, instead of in the many steps
// of the appends that encode a record.
func (p *recBuf) grow(n int) {
	if cap(p.b)-len(p.b) < n {
		p.b = slices.Grow(p.b, n)
	}
}

func (p *recBuf) put() {
	if p.chain {
		if cap(p.b) > maxPooledChain {
			p.b = nil
		}
		p.b = p.b[:0]
		chainBufs.Put(p)
		return
	}
	if cap(p.b) > maxPooledRec {
		p.b = nil
	}
	p.b = p.b[:0]
	recBufs.Put(p)
}

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) raw(p []byte)     { e.b = append(e.b, p...) }
func (e *enc) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// Time zones kept by a time value: the zero time, UTC, Local, or a fixed
// zone (name and offset). Monotonic readings are never kept.
const (
	tzZero  = 0
	tzUTC   = 1
	tzLocal = 2
	tzFixed = 3
)

func (e *enc) time(t time.Time) {
	switch {
	case t.IsZero():
		e.b = append(e.b, tzZero)
		return
	case t.Location() == time.UTC:
		e.b = append(e.b, tzUTC)
	case t.Location() == time.Local:
		e.b = append(e.b, tzLocal)
	default:
		name, off := t.Zone()
		e.b = append(e.b, tzFixed)
		e.str(name)
		e.varint(int64(off))
	}
	e.varint(t.Unix())
	e.uvarint(uint64(t.Nanosecond()))
}

// finish fills in the checksum and returns the record.
func (e *enc) finish() []byte {
	p := e.b[e.start:]
	binary.LittleEndian.PutUint32(p, crc32.Checksum(p[4:], castagnoli))
	return p
}

// checkRecord verifies the checksum and returns the kind.
func checkRecord(p []byte) (byte, bool) {
	if len(p) < recHeader {
		return 0, false
	}
	if binary.LittleEndian.Uint32(p) != crc32.Checksum(p[4:], castagnoli) {
		return 0, false
	}
	return p[4], true
}

// dec reads the fields of a checked record. Errors are sticky.
type dec struct {
	b   []byte
	err error
}

func newDec(p []byte) *dec { return &dec{b: p[recHeader:]} }

func (d *dec) fail() { d.err = errShort; d.b = nil }

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) slice() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) str() string { return string(d.slice()) }

// bytes returns a copy, nil for an empty field.
func (d *dec) bytes() []byte {
	p := d.slice()
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (d *dec) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < 1 {
		d.fail()
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v == 1
}

func (d *dec) time() time.Time {
	if d.err != nil {
		return time.Time{}
	}
	if len(d.b) < 1 {
		d.fail()
		return time.Time{}
	}
	tz := d.b[0]
	d.b = d.b[1:]
	var loc *time.Location
	switch tz {
	case tzZero:
		return time.Time{}
	case tzUTC:
		loc = time.UTC
	case tzLocal:
		loc = time.Local
	case tzFixed:
		name := d.str()
		off := d.varint()
		loc = time.FixedZone(name, int(off))
	default:
		d.fail()
		return time.Time{}
	}
	sec := d.varint()
	nsec := d.uvarint()
	if d.err != nil || nsec >= 1e9 {
		d.fail()
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).In(loc)
}

// rest returns the remaining bytes (a copy, nil when empty).
func (d *dec) rest() []byte {
	if d.err != nil || len(d.b) == 0 {
		return nil
	}
	p := append([]byte(nil), d.b...)
	d.b = nil
	return p
}

// done reports the sticky error, or an error when bytes are left over.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		return errors.New("trailing bytes in record")
	}
	return d.err
}

// unixNano clamps t to the int64 nanosecond range; the zero time is MinInt64.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	s := t.Unix()
	switch {
	case s >= math.MaxInt64/1_000_000_000:
		return math.MaxInt64
	case s <= math.MinInt64/1_000_000_000+1:
		return math.MinInt64 + 1
	}
	return t.UnixNano()
}

// ---- messages ----

// appendMessage appends m's record to dst and returns dst grown by it.
func appendMessage(dst []byte, m *store.Message) []byte {
	e := appendEnc(dst, kindMessage)
	e.uvarint(m.Seq)
	e.str(m.ID)
	e.time(m.Time)
	e.str(m.IdemKey)
	e.time(m.IdemExpires)
	e.raw(m.Body)
	e.finish()
	return e.b
}

// acceptedSize is about the size of the record appendAccepted makes of
// m and r (exactly a bound, unless a time is in a fixed zone of a long
// name): each field with its length, each time in at most 64 bytes.
func acceptedSize(m *store.Message, r *store.AuditRecord) int {
	n := recHeader + 3*binary.MaxVarintLen64 + 3*64 + len(m.ID) + len(m.IdemKey) + len(m.Body)
	for _, s := range [...]string{r.Type, r.Outcome, r.Code, r.Gate, r.Principal, r.ContractID, r.PolicyID, r.SchemaID, r.Ref} {
		n += binary.MaxVarintLen64 + len(s)
	}
	return n
}

// messageSize is about the size of the record appendMessage makes of m,
// as acceptedSize is.
func messageSize(m *store.Message) int {
	return recHeader + 3*binary.MaxVarintLen64 + 2*64 + len(m.ID) + len(m.IdemKey) + len(m.Body)
}

// auditSize is about the size of appendAudit's record of r once chained:
// its fields, its id and hashes (made by chainLocked), and the lengths.
func auditSize(r *store.AuditRecord) int {
	n := recHeader + 24*binary.MaxVarintLen64 + len("aud_") + 20 + 2*64 + 40
	for _, s := range [...]string{r.Type, r.Outcome, r.Code, r.Gate, r.Subject, r.Principal, r.ContractID,
		r.PolicyID, r.SchemaID, r.MessageID, r.Ref, r.Seqs, r.Digest} {
		n += len(s)
	}
	return n
}

// appendAccepted appends the record of m kept with its acceptance audit
// record r (unchained: Seq, ID and hashes are not kept; Subject and
// MessageID are m's). floor is recovery's bound (see accepted.go): when m
// was queued, every message of the subject up to floor had its acceptance
// record committed to the audit log.
func appendAccepted(dst []byte, m *store.Message, r *store.AuditRecord, floor uint64) []byte {
	e := appendEnc(dst, kindAccepted)
	e.uvarint(m.Seq)
	e.str(m.ID)
	e.time(m.Time)
	e.str(m.IdemKey)
	e.time(m.IdemExpires)
	e.uvarint(floor)
	for _, s := range []string{r.Type, r.Outcome, r.Code, r.Gate, r.Principal, r.ContractID, r.PolicyID, r.SchemaID, r.Ref} {
		e.str(s)
	}
	e.time(r.Time)
	e.raw(m.Body)
	e.finish()
	return e.b
}

// msgHead is what the index needs from a message record.
type msgHead struct {
	seq     uint64
	id      string
	time    time.Time
	idemKey string
	idemExp time.Time
	// Of a kindAccepted record only.
	accepted bool
	floor    uint64
	// body is the length of the message's body.
	body int
}

func isMessage(p []byte) bool {
	return len(p) >= recHeader && (p[4] == kindMessage || p[4] == kindAccepted)
}

func decodeMessageHead(p []byte) (msgHead, error) {
	if !isMessage(p) {
		return msgHead{}, errors.New("not a message record")
	}
	d := newDec(p)
	h := msgHead{seq: d.uvarint(), id: d.str(), time: d.time(), idemKey: d.str(), idemExp: d.time()}
	if p[4] == kindAccepted {
		h.accepted, h.floor = true, d.uvarint()
		for range 9 { // the acceptance record's strings (appendAccepted)
			d.slice()
		}
		d.time()
	}
	h.body = len(d.b)
	return h, d.err
}

func decodeMessage(p []byte, subject string) (store.Message, error) {
	m, _, err := decodeAccepted(p, subject)
	return m, err
}

// decodeAccepted decodes a message record and, when it is a kindAccepted
// record, the acceptance audit record kept with it (r.Type is empty
// otherwise).
func decodeAccepted(p []byte, subject string) (store.Message, store.AuditRecord, error) {
	var r store.AuditRecord
	if !isMessage(p) {
		return store.Message{}, r, errors.New("not a message record")
	}
	d := newDec(p)
	m := store.Message{Subject: subject, Seq: d.uvarint(), ID: d.str(), Time: d.time(), IdemKey: d.str(), IdemExpires: d.time()}
	if p[4] == kindAccepted {
		d.uvarint()
		for _, f := range []*string{&r.Type, &r.Outcome, &r.Code, &r.Gate, &r.Principal, &r.ContractID, &r.PolicyID, &r.SchemaID, &r.Ref} {
			*f = d.str()
		}
		r.Time = d.time()
		r.Subject, r.MessageID, r.Seqs = subject, m.ID, strconv.FormatUint(m.Seq, 10)
	}
	m.Body = d.rest()
	return m, r, d.err
}

// ---- audit ----

func encodeAudit(r *store.AuditRecord) []byte {
	return appendAudit(nil, r)
}

// appendAudit appends r's record to dst and returns dst grown by it.
func appendAudit(dst []byte, r *store.AuditRecord) []byte {
	e := appendEnc(dst, kindAudit)
	e.uvarint(r.Seq)
	for _, s := range []string{r.ID, r.Type} {
		e.str(s)
	}
	e.time(r.Time)
	for _, s := range []string{r.Outcome, r.Code, r.Gate, r.Subject, r.Principal, r.ContractID,
		r.PolicyID, r.SchemaID, r.MessageID, r.Ref, r.PrevHash, r.Hash} {
		e.str(s)
	}
	if r.Seqs != "" || r.Count != 0 || r.Digest != "" {
		// A record without them is encoded as before.
		e.str(r.Seqs)
		e.varint(int64(r.Count))
		e.str(r.Digest)
	}
	e.finish()
	return e.b
}

func decodeAudit(p []byte) (store.AuditRecord, error) {
	if len(p) < recHeader || p[4] != kindAudit {
		return store.AuditRecord{}, errors.New("not an audit record")
	}
	d := newDec(p)
	var r store.AuditRecord
	r.Seq = d.uvarint()
	r.ID = d.str()
	r.Type = d.str()
	r.Time = d.time()
	for _, f := range []*string{&r.Outcome, &r.Code, &r.Gate, &r.Subject, &r.Principal, &r.ContractID,
		&r.PolicyID, &r.SchemaID, &r.MessageID, &r.Ref, &r.PrevHash, &r.Hash} {
		*f = d.str()
	}
	if d.err == nil && len(d.b) > 0 {
		r.Seqs = d.str()
		r.Count = int(d.varint())
		r.Digest = d.str()
	}
	return r, d.done()
}

func encodeCheckpoint(cp store.Checkpoint) []byte { return encodeCheckpointFloors(cp, nil) }

// encodeCheckpointFloors encodes cp followed, when there are any, by the
// acceptance floors of the subjects when it was taken (see
// TrimAuditBefore): a count, then a subject name and a floor each.
func encodeCheckpointFloors(cp store.Checkpoint, floors map[string]uint64) []byte {
	e := newEnc(kindCheckpoint, 80)
	e.uvarint(cp.Seq)
	e.str(cp.Hash)
	if len(floors) > 0 {
		names := slices.Sorted(maps.Keys(floors))
		e.uvarint(uint64(len(names)))
		for _, n := range names {
			e.str(n)
			e.uvarint(floors[n])
		}
	}
	return e.finish()
}

func decodeCheckpointFloors(p []byte) (store.Checkpoint, map[string]uint64, error) {
	if len(p) < recHeader || p[4] != kindCheckpoint {
		return store.Checkpoint{}, nil, errors.New("not a checkpoint record")
	}
	d := newDec(p)
	cp := store.Checkpoint{Seq: d.uvarint(), Hash: d.str()}
	var floors map[string]uint64
	if d.err == nil && len(d.b) > 0 {
		// Each floor takes at least two bytes (an empty name, a zero);
		// the map grows with the floors read, not with what the count
		// claims (a million empty names are one floor).
		n := d.uvarint()
		if n > uint64(len(d.b))/2 {
			return cp, nil, errShort
		}
		floors = make(map[string]uint64, min(n, 64))
		for range n {
			name := d.str()
			floors[name] = d.uvarint()
		}
	}
	return cp, floors, d.done()
}

// ---- quarantine ----

func encodeQuarantine(r *store.QuarantineRecord) []byte {
	e := newEnc(kindQuarantine, 128+len(r.Body))
	e.str(r.ID)
	e.time(r.Time)
	for _, s := range []string{r.Subject, r.Principal, r.ContractID, r.PolicyID, r.SchemaID,
		r.MessageID, r.Code, r.Gate, r.Reason} {
		e.str(s)
	}
	e.bytes(r.Body)
	e.bool(r.Released)
	e.str(r.ReleasedBy)
	e.time(r.ReleasedAt)
	e.str(r.ReleasedAs)
	return e.finish()
}

func decodeQuarantine(p []byte) (store.QuarantineRecord, error) {
	if len(p) < recHeader || p[4] != kindQuarantine {
		return store.QuarantineRecord{}, errors.New("not a quarantine record")
	}
	d := newDec(p)
	var r store.QuarantineRecord
	r.ID = d.str()
	r.Time = d.time()
	for _, f := range []*string{&r.Subject, &r.Principal, &r.ContractID, &r.PolicyID, &r.SchemaID,
		&r.MessageID, &r.Code, &r.Gate, &r.Reason} {
		*f = d.str()
	}
	r.Body = d.bytes()
	r.Released = d.bool()
	r.ReleasedBy = d.str()
	r.ReleasedAt = d.time()
	r.ReleasedAs = d.str()
	return r, d.done()
}

// ---- contracts ----

func encodeContract(c *store.ContractRecord) []byte {
	e := newEnc(kindContract, 96+len(c.Body))
	e.str(c.ID)
	e.str(c.Principal)
	e.str(c.Region)
	e.time(c.IssuedAt)
	e.time(c.ExpiresAt)
	e.bool(c.Revoked)
	e.bytes(c.Body)
	return e.finish()
}

func decodeContract(d *dec) store.ContractRecord {
	return store.ContractRecord{ID: d.str(), Principal: d.str(), Region: d.str(),
		IssuedAt: d.time(), ExpiresAt: d.time(), Revoked: d.bool(), Body: d.bytes()}
}
