package jetstream

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// A message trimmed while its idempotency key is live is kept in the idem
// bucket, under keptKey of its id and key, until the key expires (and the
// claim's grace after): a retry within the key's TTL finds its claim, then
// the kept message, and is answered with the original, as the policy
// promises whatever retention keeps. Claim keys are single tokens (token),
// so the dotted kept keys never meet them.
//
// A trimmed message's id is free again, so several trimmed messages may
// have had one id, each with a live key of its own: a kept copy is named
// by both, and only a copy holding the claim's key answers for it.

// keptKey is the idem bucket key of the kept copy of message id, which
// claimed idempotency key key.
func keptKey(id, key string) string { return "kept." + token(id) + "." + token(key) }

// legacyKeptKey is the key a kept copy had before it was named by its
// idempotency key too; such a copy answers only for the key it holds.
func legacyKeptKey(id string) string { return "kept." + token(id) }

// keptMessage is the kept copy of a trimmed message.
type keptMessage struct {
	Subject     string    `json:"subject"`
	Seq         uint64    `json:"seq"`
	ID          string    `json:"id"`
	Time        time.Time `json:"time"`
	IdemKey     string    `json:"idemKey"`
	IdemExpires time.Time `json:"idemExpires"`
	Body        []byte    `json:"body"`
}

// keptRecord is the value of a kept message as it was written before
// encodeKept: JSON, the strings that are not UTF-8, which a JSON string
// would not keep, also there as bytes (rawText). Copies of that form are
// still read.
type keptRecord struct {
	keptMessage
	RawSubject []byte `json:"rawSubject,omitempty"`
	RawID      []byte `json:"rawId,omitempty"`
	RawIdemKey []byte `json:"rawIdemKey,omitempty"`
}

// keep stores copies of the messages among ms whose idempotency keys are
// live at at (the clock of the messages), before a trim removes them; each
// stays in the bucket as long as its key's claim would. A copy already
// kept stays.
func (s *Store) keep(ctx context.Context, ms []store.Message, at time.Time) error {
	for _, m := range ms {
		if m.IdemKey == "" || !at.Before(m.IdemExpires) {
			continue
		}
		_, err := s.idem.Create(ctx, keptKey(m.ID, m.IdemKey), encodeKept(m), jetstream.KeyTTL(claimTTL(m.IdemExpires, at, s.claimGrace)))
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return s.fail(ctx, err)
		}
	}
	return nil
}

// kept returns the kept copy of message id that claimed idempotency key
// key, or store.ErrNotFound.
func (s *Store) kept(ctx context.Context, id, key string) (store.Message, error) {
	return s.keptFrom(ctx, id, key, false)
}

// keptFrom is kept; with leader, read from the idem bucket's leader,
// never from a replica behind.
func (s *Store) keptFrom(ctx context.Context, id, key string, leader bool) (store.Message, error) {
	m, err := s.keptAt(ctx, keptKey(id, key), leader)
	if errors.Is(err, store.ErrNotFound) {
		m, err = s.keptAt(ctx, legacyKeptKey(id), leader)
	}
	if err == nil && (m.ID != id || m.IdemKey != key) {
		return store.Message{}, store.ErrNotFound // another message's copy
	}
	return m, err
}

// keptAt reads the kept copy under key at of the idem bucket, from the
// bucket's leader with leader.
func (s *Store) keptAt(ctx context.Context, at string, leader bool) (store.Message, error) {
	if leader {
		m, err := leaderLast(ctx, s.nc, s.bucketName("idem"), at)
		if err != nil {
			return store.Message{}, s.fail(ctx, err)
		}
		if m == nil {
			return store.Message{}, store.ErrNotFound
		}
		return s.decodeKeptValue(m.Data, m.Sequence)
	}
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.idem.Get(ctx, at) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return store.Message{}, store.ErrNotFound
	}
	if err != nil {
		return store.Message{}, s.fail(ctx, err)
	}
	return s.decodeKeptValue(e.Value(), e.Revision())
}

// decodeKeptValue decodes the kept copy v, revision rev of the idem
// bucket.
func (s *Store) decodeKeptValue(v []byte, rev uint64) (store.Message, error) {
	if len(v) > 0 && v[0] == keptVersion {
		m, ok := decodeKept(v)
		if !ok {
			return store.Message{}, &store.CorruptError{File: s.bucketName("idem"), Offset: int64(rev), Reason: "kept message does not decode"}
		}
		return m, nil
	}
	var k keptRecord
	if err := json.Unmarshal(v, &k); err != nil {
		return store.Message{}, &store.CorruptError{File: s.bucketName("idem"), Reason: "kept message does not decode: " + err.Error()}
	}
	m := store.Message(k.keptMessage)
	m.Subject = cmp.Or(string(k.RawSubject), m.Subject)
	m.ID = cmp.Or(string(k.RawID), m.ID)
	m.IdemKey = cmp.Or(string(k.RawIdemKey), m.IdemKey)
	return m, nil
}

// keptVersion starts a kept copy written by encodeKept (a JSON copy, the
// earlier form, starts with '{').
const keptVersion = 1

// encodeKept is the bucket's value of the kept copy of m: keptVersion;
// the subject, id and idempotency key, each its length (uvarint) and its
// bytes; the sequence (uvarint); the time and the key's expiry (Unix
// nanoseconds, varint); then the body as it is. The body is not base64
// (as a JSON copy had it, a third larger), so every message the stream
// took can be kept: the copy adds little more than its strings to the
// body, and the stored message had those in its headers.
func encodeKept(m store.Message) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(m.Subject)+len(m.ID)+len(m.IdemKey)+3*binary.MaxVarintLen64+len(m.Body))
	b = append(b, keptVersion)
	for _, v := range []string{m.Subject, m.ID, m.IdemKey} {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendVarint(b, m.Time.UnixNano())
	b = binary.AppendVarint(b, m.IdemExpires.UnixNano())
	return append(b, m.Body...)
}

// decodeKept reads a copy encodeKept wrote; false when it does not
// decode.
func decodeKept(b []byte) (store.Message, bool) {
	b = b[1:]
	var strs [3]string
	for i := range strs {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return store.Message{}, false
		}
		strs[i], b = string(b[k:k+int(n)]), b[k+int(n):]
	}
	seq, k := binary.Uvarint(b)
	if k <= 0 {
		return store.Message{}, false
	}
	b = b[k:]
	var ts [2]int64
	for i := range ts {
		if ts[i], k = binary.Varint(b); k <= 0 {
			return store.Message{}, false
		}
		b = b[k:]
	}
	m := store.Message{Subject: strs[0], ID: strs[1], IdemKey: strs[2], Seq: seq,
		Time: time.Unix(0, ts[0]).UTC(), IdemExpires: time.Unix(0, ts[1]).UTC()}
	if len(b) > 0 {
		m.Body = b
	}
	return m, true
}
