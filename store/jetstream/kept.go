package jetstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// A message trimmed while its idempotency key is live is kept in the idem
// bucket, under keptKey of its id, until the key expires (and the claim's
// grace after): a retry within the key's TTL finds its claim, then the
// kept message, and is answered with the original, as the policy promises
// whatever retention keeps. Claim keys are single tokens (token), so the
// dotted kept keys never meet them.

// keptKey is the idem bucket key of the kept copy of message id.
func keptKey(id string) string { return "kept." + token(id) }

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

// keptRecord is the bucket's value of a kept message: the strings that
// are not UTF-8, which a JSON string would not keep, are also there as
// bytes (rawText).
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
		val, err := json.Marshal(keptRecord{keptMessage: keptMessage(m),
			RawSubject: rawText(m.Subject), RawID: rawText(m.ID), RawIdemKey: rawText(m.IdemKey)})
		if err != nil {
			return err
		}
		_, err = s.idem.Create(ctx, keptKey(m.ID), val, jetstream.KeyTTL(claimTTL(m.IdemExpires, at, s.claimGrace)))
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return s.fail(ctx, err)
		}
	}
	return nil
}

// kept returns the kept copy of message id, or store.ErrNotFound.
func (s *Store) kept(ctx context.Context, id string) (store.Message, error) {
	e, err := direct(ctx, s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return s.idem.Get(ctx, keptKey(id)) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return store.Message{}, store.ErrNotFound
	}
	if err != nil {
		return store.Message{}, s.fail(ctx, err)
	}
	var k keptRecord
	if err := json.Unmarshal(e.Value(), &k); err != nil {
		return store.Message{}, &store.CorruptError{File: s.bucketName("idem"), Reason: "kept message does not decode: " + err.Error()}
	}
	m := store.Message(k.keptMessage)
	m.Subject = cmp.Or(string(k.RawSubject), m.Subject)
	m.ID = cmp.Or(string(k.RawID), m.ID)
	m.IdemKey = cmp.Or(string(k.RawIdemKey), m.IdemKey)
	return m, nil
}
