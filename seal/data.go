package seal

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
)

// Field is the member of message data that holds the sealed part.
const Field = "sealed"

// ErrNotSealed is returned by OpenData when data has no sealed part.
var ErrNotSealed = errors.New("seal: data has no sealed part")

// SealData seals payload as Seal does and returns message data that holds
// the clear fields beside it:
//
//	{...clear..., "sealed": {Sealed}}
//
// The clear fields are the ones the broker must read to route the message
// (a room, a kind, a tenant): they stay in clear, readable by the broker and
// by every subscriber, and the seal does not cover them. Put nothing in
// clear that is not needed for routing, and sign the envelope
// (pigeon.SignMessage) to protect them from change. clear must not hold
// Field and must marshal to JSON; it is not modified.
func SealData(clear map[string]any, payload []byte, recipientKID string, recipientPub []byte, senderKID string, senderPriv ed25519.PrivateKey) (json.RawMessage, error) {
	if _, ok := clear[Field]; ok {
		return nil, fmt.Errorf("seal: clear fields must not include %q", Field)
	}
	s, err := Seal(payload, recipientKID, recipientPub, senderKID, senderPriv)
	if err != nil {
		return nil, err
	}
	m := make(map[string]any, len(clear)+1)
	for k, v := range clear {
		m[k] = v
	}
	m[Field] = s
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("seal: clear fields: %w", err)
	}
	return b, nil
}

// sealedMembers are the member names of a Sealed, spelled exactly.
var sealedMembers = map[string]bool{"v": true, "alg": true, "recipientKid": true, "senderKid": true,
	"ephemeralKey": true, "nonce": true, "ciphertext": true, "sig": true}

// uniqueMembers reports whether raw is a JSON object with no member name
// twice and, when allowed is not nil, only names in allowed, spelled
// exactly. encoding/json alone keeps the last of two equal names and
// matches "Sig" or "SIG" to a struct's sig, where other readers (the other
// clients) take names exactly or keep the first: one sealed part would open
// to two payloads.
func uniqueMembers(raw []byte, allowed map[string]bool) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok || (allowed != nil && !allowed[name]) || seen[name] {
			return false
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
	}
	return true
}

// ReadSealed returns the sealed part of message data built by SealData,
// unopened, read as OpenData reads it (the same errors), so that a
// recipient learns which keys open it before it opens it: RecipientKID
// names the encryption key it was sealed for (another recipient's: skip
// it), SenderKID the sender's signing key to open it with
// (pigeon.SelectKey with the message time). Nothing in it is
// authenticated until Open or OpenData succeeds.
func ReadSealed(data json.RawMessage) (*Sealed, error) {
	s, _, err := sealedPart(data)
	return s, err
}

// sealedPart reads data as OpenData does: its sealed part, decoded
// strictly, and all its members.
func sealedPart(data json.RawMessage) (*Sealed, map[string]json.RawMessage, error) {
	var parts map[string]json.RawMessage
	if err := json.Unmarshal(data, &parts); err != nil || parts == nil {
		return nil, nil, fmt.Errorf("seal: data is not a JSON object")
	}
	raw, ok := parts[Field]
	if !ok {
		return nil, nil, ErrNotSealed
	}
	if !uniqueMembers(data, nil) {
		return nil, nil, fmt.Errorf("%w: data has a member twice", ErrTampered)
	}
	if !uniqueMembers(raw, sealedMembers) {
		return nil, nil, fmt.Errorf("%w: sealed part is not a sealed object", ErrTampered)
	}
	var s Sealed
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, nil, fmt.Errorf("%w: sealed part is not a sealed object", ErrTampered)
	}
	return &s, parts, nil
}

// OpenData splits message data built by SealData into its clear fields and
// the opened payload, with the recipient's X25519 private key and the
// sender's Ed25519 public key. It returns ErrNotSealed when data is a JSON
// object without Field, ErrTampered when the sealed part is malformed or
// fails to open (an unknown member in it, a member name spelled in another
// case, or one given twice counts as malformed), and
// ErrUnsupported for an unknown version. The clear fields are returned as
// they came, decoded as encoding/json decodes into any: they are not
// authenticated by the seal.
func OpenData(data json.RawMessage, recipientPriv []byte, senderPub ed25519.PublicKey) (clear map[string]any, payload []byte, err error) {
	s, parts, err := sealedPart(data)
	if err != nil {
		return nil, nil, err
	}
	payload, err = Open(s, recipientPriv, senderPub)
	if err != nil {
		return nil, nil, err
	}
	clear = make(map[string]any, len(parts)-1)
	for k, v := range parts {
		if k == Field {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return nil, nil, err
		}
		clear[k] = x
	}
	return clear, payload, nil
}
