package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Genesis is the prevHash of the first audit record.
const Genesis = "0000000000000000000000000000000000000000000000000000000000000000"

// AuditRecord is one entry of the tamper-evident audit log. It carries ids
// and codes, never payload values.
type AuditRecord struct {
	Seq        uint64    `json:"seq"`
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	Time       time.Time `json:"time"`
	Outcome    string    `json:"outcome,omitempty"`
	Code       string    `json:"code,omitempty"`
	Gate       string    `json:"gate,omitempty"`
	Subject    string    `json:"subject,omitempty"`
	Principal  string    `json:"principal,omitempty"`
	ContractID string    `json:"contractId,omitempty"`
	PolicyID   string    `json:"policyId,omitempty"`
	SchemaID   string    `json:"schemaId,omitempty"`
	MessageID  string    `json:"messageId,omitempty"`
	Ref        string    `json:"ref,omitempty"`
	PrevHash   string    `json:"prevHash"`
	Hash       string    `json:"hash"`
	// Seqs, Count and Digest describe the messages of one subject that a
	// batch record covers (a delivery batch, an acknowledged range): Seqs
	// lists their sequences as ascending ranges ("4-9,12"), Count says how
	// many there are and Digest is the SHA-256 (hex) of their ids in
	// sequence order, each followed by a newline. On a record of one
	// message named by its id (publish.accepted; delivery.acked,
	// delivery.nacked, delivery.exhausted, ack.denied and nack.denied of
	// one message) Seqs is that message's sequence alone and Count is 0:
	// a message id names one message at a time only, the sequence names it
	// for good. Empty elsewhere, and on records of one message written
	// before they carried it; the hash covers them only when set.
	Seqs   string `json:"seqs,omitempty"`
	Count  int    `json:"count,omitempty"`
	Digest string `json:"digest,omitempty"`
}

// Checkpoint stands for audit records removed by retention: the sequence and
// hash of the last removed record. Verification of the remainder starts from
// it instead of Genesis.
type Checkpoint struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// ComputeHash returns the SHA-256 (hex) over the record without its Hash
// field. The input is every field, in declaration order, each prefixed by its
// length as a uvarint, so no two distinct records share an input. The time
// is taken as UnixNano, which names only the instants from 1678 to 2262:
// two instants 2^64 ns apart share it, so a Verifier refuses a record whose
// time is outside that range (see timeHashed). UnixNano has no zone either,
// so a Verifier refuses a time whose Location is not time.UTC.
func (r *AuditRecord) ComputeHash() string {
	var out [64]byte
	return string(r.AppendHash(out[:0]))
}

// AppendHash appends to dst the record's hash as ComputeHash returns it:
// 64 hex digits. A writer that chains many records hashes them into one
// buffer with it, rather than allocating a string for each.
func (r *AuditRecord) AppendHash(dst []byte) []byte {
	var buf [512]byte
	b := buf[:0]
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, r.Seq)
	field(r.ID)
	field(r.Type)
	b = binary.AppendVarint(b, r.Time.UnixNano())
	field(r.Outcome)
	field(r.Code)
	field(r.Gate)
	field(r.Subject)
	field(r.Principal)
	field(r.ContractID)
	field(r.PolicyID)
	field(r.SchemaID)
	field(r.MessageID)
	field(r.Ref)
	field(r.PrevHash)
	if r.Seqs != "" || r.Count != 0 || r.Digest != "" {
		// Records without them hash as they always have.
		field(r.Seqs)
		b = binary.AppendVarint(b, int64(r.Count))
		field(r.Digest)
	}
	sum := sha256.Sum256(b)
	return hex.AppendEncode(dst, sum[:])
}

// ChainError says where an audit chain stopped verifying.
type ChainError struct {
	Seq    uint64
	Reason string
}

func (e *ChainError) Error() string {
	return "store: audit chain tampered at seq " + strconv.FormatUint(e.Seq, 10) + ": " + e.Reason
}

// Is makes errors.Is(err, ErrTampered) true.
func (e *ChainError) Is(target error) bool { return target == ErrTampered }

// Verifier checks an audit chain record by record. The zero value starts at
// Genesis; set From to continue after a checkpoint.
type Verifier struct {
	From  Checkpoint
	count uint64
	prev  Checkpoint
	begun bool
}

// Next checks one record, which must follow the previous one.
func (v *Verifier) Next(r *AuditRecord) error {
	if !v.begun {
		v.begun = true
		v.prev = v.From
		if v.prev.Hash == "" {
			v.prev.Hash = Genesis
		}
	}
	if v.prev.Seq == math.MaxUint64 {
		// want would wrap to 0: a forged checkpoint or chain at the
		// end of the sequences would go on from 0.
		return &ChainError{Seq: r.Seq, Reason: "a record after sequence 2^64-1"}
	}
	want := v.prev.Seq + 1
	if r.Seq != want {
		return &ChainError{Seq: r.Seq, Reason: fmt.Sprintf("sequence %d out of order, want %d", r.Seq, want)}
	}
	if r.PrevHash != v.prev.Hash {
		return &ChainError{Seq: r.Seq, Reason: "prevHash does not match the previous record"}
	}
	if !timeHashed(r.Time) {
		// Its hash would also be the hash of another instant: a time
		// moved by 584 years (seconds and nanoseconds rewritten in a
		// store file) would still verify.
		return &ChainError{Seq: r.Seq, Reason: "time outside the range the hash covers (1678 to 2262)"}
	}
	if r.Time.Location() != time.UTC {
		// The hash covers the instant, not the zone the store keeps
		// with it; every record is written in UTC, so another zone
		// (a fixed one named "UTC" 14 hours ahead, one JSON cannot
		// write) was put there since, to show another day or to make
		// the record unreadable.
		return &ChainError{Seq: r.Seq, Reason: "time not in UTC (the hash does not cover a zone)"}
	}
	if r.ComputeHash() != r.Hash {
		return &ChainError{Seq: r.Seq, Reason: "hash does not match the record"}
	}
	if r.Count != 0 {
		if n, ok := CountSeqs(r.Seqs); !ok || r.Count < 0 || n != uint64(r.Count) || len(r.Digest) != 64 {
			return &ChainError{Seq: r.Seq, Reason: "a batch record whose seqs, count and digest disagree"}
		}
	}
	v.prev = Checkpoint{Seq: r.Seq, Hash: r.Hash}
	v.count++
	return nil
}

// timeHashed reports whether ComputeHash binds t: whether t.UnixNano names
// t and no other instant.
func timeHashed(t time.Time) bool { return time.Unix(0, t.UnixNano()).Equal(t) }

// Count is how many records verified so far.
func (v *Verifier) Count() uint64 { return v.count }

// Head is the checkpoint of the last verified record.
func (v *Verifier) Head() Checkpoint {
	if !v.begun {
		return v.From
	}
	return v.prev
}

// VerifyAudit walks the audit chain of log from its checkpoint to its last
// record and returns how many records verified. A record that does not
// verify stops it with a *ChainError (which matches ErrTampered) naming
// that record; an error of the log itself is returned as it is.
func VerifyAudit(ctx context.Context, log AuditLog) (uint64, error) {
	_, cp, err := log.AuditHead(ctx)
	if err != nil {
		return 0, err
	}
	v := Verifier{From: cp}
	from := cp.Seq + 1
	for {
		recs, err := log.ReadAudit(ctx, from, verifyBatch)
		if err != nil {
			return v.Count(), err
		}
		for i := range recs {
			if err := v.Next(&recs[i]); err != nil {
				return v.Count(), err
			}
		}
		if len(recs) < verifyBatch {
			return v.Count(), nil
		}
		from = recs[len(recs)-1].Seq + 1
	}
}

// verifyBatch is how many records VerifyAudit reads at a time.
const verifyBatch = 4096

// VerifyChain checks recs as a contiguous chain starting after from.
func VerifyChain(from Checkpoint, recs []AuditRecord) error {
	v := Verifier{From: from}
	for i := range recs {
		if err := v.Next(&recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// CountSeqs counts the sequences that the Seqs of a batch record lists:
// ascending, disjoint ranges "a-b" or single sequences, comma separated,
// every sequence at least 1. ok is false for anything else. Such ranges
// list at most 2^64-1 sequences, so n is exact: ranges that would sum past
// 2^64-1 (and match a small count modulo 2^64) overlap and are refused,
// and the sum is checked for a carry besides.
func CountSeqs(seqs string) (n uint64, ok bool) {
	wrapped := false
	ok = WalkSeqs(seqs, func(lo, hi uint64) bool {
		var carry uint64
		n, carry = bits.Add64(n, hi-lo+1, 0)
		wrapped = carry != 0
		return !wrapped
	})
	return n, ok && !wrapped && n > 0
}

// WalkSeqs calls fn with each range of the Seqs of a batch record, in
// order, until fn returns false. It reports whether seqs is well formed
// (as far as it read): ascending, disjoint ranges "a-b" or single
// sequences, comma separated, every sequence at least 1.
func WalkSeqs(seqs string, fn func(lo, hi uint64) bool) bool {
	var last uint64
	for first := true; seqs != ""; first = false {
		part := seqs
		if i := strings.IndexByte(seqs, ','); i >= 0 {
			part, seqs = seqs[:i], seqs[i+1:]
			if seqs == "" {
				return false
			}
		} else {
			seqs = ""
		}
		lo, hi := part, part
		if i := strings.IndexByte(part, '-'); i >= 0 {
			lo, hi = part[:i], part[i+1:]
		}
		a, err1 := strconv.ParseUint(lo, 10, 64)
		b, err2 := strconv.ParseUint(hi, 10, 64)
		if err1 != nil || err2 != nil || a == 0 || b < a || (!first && a <= last) {
			return false
		}
		last = b
		if !fn(a, b) {
			return true
		}
	}
	return true
}
