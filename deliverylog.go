package pigeon

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"

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

type logged struct {
	seq uint64
	id  string
}

func (l *deliveryLog) add(seq uint64, id string) { l.entries = append(l.entries, logged{seq, id}) }

func (l *deliveryLog) empty() bool { return len(l.entries) == 0 }

// records turns what the log holds into ev records built on base, at most
// maxLogged messages each, and empties it. The messages are sorted by
// sequence: Seqs lists them as ranges and Digest binds each to its id.
func (l *deliveryLog) records(ev Event, outcome Outcome, base store.AuditRecord) []store.AuditRecord {
	if len(l.entries) == 0 {
		return nil
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
	var out []store.AuditRecord
	for es := l.entries; len(es) > 0; {
		n := min(len(es), maxLogged)
		out = append(out, batchRecord(ev, outcome, base, es[:n]))
		es = es[n:]
	}
	clear(l.entries)
	l.entries = l.entries[:0]
	return out
}

// batchRecord is the record of es, sorted by sequence.
func batchRecord(ev Event, outcome Outcome, base store.AuditRecord, es []logged) store.AuditRecord {
	r := ev.record(outcome, CodeOK, base)
	if len(es) == 1 {
		r.MessageID = es[0].id
	}
	h := sha256.New()
	var seqs []byte
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
	var buf []byte
	for _, e := range es {
		buf = append(append(buf[:0], e.id...), '\n')
		h.Write(buf)
	}
	r.Seqs, r.Count, r.Digest = string(seqs), len(es), hex.EncodeToString(h.Sum(nil))
	return r
}

// DeliveryDigest is the Digest of a batch record over ids, given in
// sequence order: an auditor recomputes it from the stored messages.
func DeliveryDigest(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ParseSeqs reads the Seqs of a batch record ("4-9,12") into the
// sequences it lists, ascending; it refuses anything else, and lists of
// more than max sequences.
func ParseSeqs(s string, max int) ([]uint64, error) {
	var out []uint64
	bad := func() ([]uint64, error) {
		return nil, NewError(CodeInvalidArgument, "seqs %q is not a list of ascending ranges", s)
	}
	if s == "" {
		return nil, nil
	}
	var last uint64
	for len(s) > 0 {
		part := s
		if i := strings.IndexByte(s, ','); i >= 0 {
			part, s = s[:i], s[i+1:]
			if s == "" {
				return bad()
			}
		} else {
			s = ""
		}
		lo, hi := part, part
		if i := strings.IndexByte(part, '-'); i >= 0 {
			lo, hi = part[:i], part[i+1:]
		}
		a, err1 := strconv.ParseUint(lo, 10, 64)
		b, err2 := strconv.ParseUint(hi, 10, 64)
		if err1 != nil || err2 != nil || a == 0 || b < a || (len(out) > 0 && a <= last) {
			return bad()
		}
		if uint64(len(out))+(b-a)+1 > uint64(max) {
			return nil, NewError(CodeInvalidArgument, "seqs %q lists more than %d sequences", s, max)
		}
		for v := a; ; v++ {
			out = append(out, v)
			if v == b {
				break
			}
		}
		last = b
	}
	return out, nil
}
