package pigeon

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"

	"pigeon/store"
)

// maxLogged is the most messages one delivery record covers; a larger
// batch is recorded in several.
const maxLogged = 1024

// deliveryLog collects the messages of one subject that one consumer was
// handed, or acknowledged, so that one audit record stands for all of
// them: the evidence of every delivery without a hash-chained record per
// message. The zero value is empty; it is not safe for concurrent use.
type deliveryLog struct {
	entries []logged
}

// linesPool holds the room batchRecord lists the ids of a large batch in,
// up to maxLines bytes each: those of a whole record of maxLogged
// messages with ids of the broker's.
var linesPool = sync.Pool{New: func() any { return new([]byte) }}

const maxLines = 32 << 10

type logged struct {
	seq uint64
	id  string
}

func (l *deliveryLog) add(seq uint64, id string) { l.entries = append(l.entries, logged{seq, id}) }

// addAll adds msgs, handed over by a pull receive or a replay.
func (l *deliveryLog) addAll(msgs []*Message) {
	for _, m := range msgs {
		l.add(m.Sequence, m.ID)
	}
}

// record turns what the log holds into ev records built on base, at most
// maxLogged messages each, hands each to write, and empties the log
// (keeping its room for the next batch). The messages are sorted by
// sequence: Seqs lists them as ranges and Digest binds each to its id.
func (l *deliveryLog) record(ev Event, outcome Outcome, base store.AuditRecord, write func(store.AuditRecord)) {
	if len(l.entries) == 0 {
		return
	}
	slices.SortFunc(l.entries, func(a, b logged) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	for es := l.entries; len(es) > 0; {
		n := min(len(es), maxLogged)
		write(batchRecord(ev, outcome, base, es[:n]))
		es = es[n:]
	}
	clear(l.entries)
	l.entries = l.entries[:0]
}

// batchRecord is the record of es, sorted by sequence.
func batchRecord(ev Event, outcome Outcome, base store.AuditRecord, es []logged) store.AuditRecord {
	r := ev.record(outcome, CodeOK, base)
	if len(es) == 1 {
		r.MessageID = es[0].id
	}
	var sb [64 + 2*sha256.Size]byte // the digest goes after the ranges
	seqs := sb[:0]
	for i := 0; i < len(es); {
		j := i
		for j+1 < len(es) && es[j+1].seq == es[j].seq+1 {
			j++
		}
		if len(seqs) > 0 {
			seqs = append(seqs, ',')
		}
		seqs = strconv.AppendUint(seqs, es[i].seq, 10)
		if j > i {
			seqs = append(seqs, '-')
			seqs = strconv.AppendUint(seqs, es[j].seq, 10)
		}
		i = j + 1
	}
	var sum [sha256.Size]byte
	var buf [512]byte
	if n := linesLen(es); n <= len(buf) {
		sum = sha256.Sum256(appendLines(buf[:0], es))
	} else {
		bp := linesPool.Get().(*[]byte)
		lines := appendLines(slices.Grow((*bp)[:0], n), es)
		sum = sha256.Sum256(lines)
		if cap(lines) <= maxLines {
			*bp = lines[:0]
			linesPool.Put(bp)
		}
	}
	// Seqs and Digest are two parts of one string: one allocation.
	text := string(hex.AppendEncode(seqs, sum[:]))
	r.Seqs, r.Count, r.Digest = text[:len(seqs)], len(es), text[len(seqs):]
	return r
}

// linesLen is the length of the ids of es, one per line.
func linesLen(es []logged) int {
	n := len(es)
	for _, e := range es {
		n += len(e.id)
	}
	return n
}

// appendLines appends the ids of es to b, one per line.
func appendLines(b []byte, es []logged) []byte {
	for _, e := range es {
		b = append(append(b, e.id...), '\n')
	}
	return b
}

// DeliveryDigest is the Digest of a batch record over ids, given in
// sequence order: an auditor recomputes it from the stored messages.
func DeliveryDigest(ids []string) string {
	var lines []byte
	for _, id := range ids {
		lines = append(append(lines, id...), '\n')
	}
	return digestLines(lines)
}

// digestLines is the hex SHA-256 of the ids, one per line.
func digestLines(lines []byte) string {
	sum := sha256.Sum256(lines)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}
