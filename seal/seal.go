// Package seal encrypts a payload for one recipient and signs it by its
// sender, end to end: the broker that carries a sealed payload can neither
// read it nor alter it unnoticed, and never holds a private key.
//
// # Construction
//
// Seal draws an ephemeral X25519 key pair and agrees a secret with the
// recipient's published X25519 key (crypto/ecdh); HKDF-SHA256 (crypto/hkdf)
// turns the secret into a one-message key; XChaCha20-Poly1305
// (golang.org/x/crypto/chacha20poly1305) encrypts the payload under a
// random 24-byte nonce with a header as associated data; the sender's
// Ed25519 key (crypto/ed25519) signs the header and the ciphertext. The
// header binds the version, the algorithm, both kids, the recipient's and
// the sender's public keys, the ephemeral key and the nonce, so that no
// field can be swapped, and a third party cannot re-sign someone else's
// ciphertext as its own. Nothing here is hand-rolled cryptography.
//
// Open verifies the signature first and decrypts second; any failure is
// ErrTampered, without saying which check failed.
//
// # What is not protected
//
// The seal hides the payload, not its length (ciphertext = payload + 16
// bytes), not the kids, and not the fields that travel in clear beside it
// in message data (see SealData): routing fields stay in clear because the
// broker's routes, selectors and schema gate need them. The seal does not
// authenticate those clear fields nor bind the payload to one message; sign
// the envelope with pigeon.SignMessage for that, as its signature covers
// subject, id, time and the whole data, sealed part included. The seal
// offers no forward secrecy towards the recipient (whoever obtains the
// recipient's private key can open past payloads sealed for it) and no
// replay protection of its own.
//
// # Concurrency
//
// All functions are safe for concurrent use; a Sealed value is not mutated
// by Open.
package seal

import (
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/chacha20poly1305"
)

// Version and Alg are the only format this package writes and reads.
const (
	Version = 1
	Alg     = "X25519-HKDF-SHA256-XChaCha20Poly1305-Ed25519"
)

// context opens the header; it separates this format from every other
// message an Ed25519 key may sign (a Pigeon envelope signature starts with
// `["pigeon-sig-v1"` or `["pigeon-sig-v2"`).
const context = "pigeon-seal-v1\x00"

// keyInfo is the HKDF info string of the payload key.
const keyInfo = "pigeon-seal-v1 xchacha20poly1305 key"

// Sizes of the decoded fields.
const (
	KeySize   = 32 // X25519 public and private keys
	NonceSize = chacha20poly1305.NonceSizeX
	Overhead  = chacha20poly1305.Overhead
	MaxKIDLen = 128
)

var (
	// ErrTampered is returned by Open when the sealed payload fails a
	// check: it was altered, it is malformed, or it was not sealed for this
	// recipient key by this sender key. The checks do not tell these apart.
	ErrTampered = errors.New("seal: sealed payload failed authentication")
	// ErrUnsupported is returned for a version or algorithm this package
	// does not know.
	ErrUnsupported = errors.New("seal: unsupported version or algorithm")
)

// enc is how binary fields travel: base64url without padding; Strict
// rejects non-zero trailing bits, so each value has exactly one spelling.
var enc = base64.RawURLEncoding.Strict()

// Sealed is a sealed payload as it travels in JSON. Binary fields are
// base64url without padding.
type Sealed struct {
	V            int    `json:"v"`
	Alg          string `json:"alg"`
	RecipientKID string `json:"recipientKid"`
	SenderKID    string `json:"senderKid"`
	EphemeralKey string `json:"ephemeralKey"` // X25519, 32 bytes
	Nonce        string `json:"nonce"`        // 24 bytes
	Ciphertext   string `json:"ciphertext"`   // payload + 16-byte tag
	Sig          string `json:"sig"`          // Ed25519 over header ‖ ciphertext
}

// Seal encrypts plaintext for the recipient's X25519 public key
// recipientPub (32 bytes) and signs it with the sender's Ed25519 key. The
// kids name the keys as published (1 to 128 bytes of UTF-8 each). Each
// call uses a fresh ephemeral key and nonce, so sealing the same payload
// twice gives unrelated outputs. It fails on malformed keys or kids,
// including a recipient key of low order or not in canonical form (see
// WeakEncryptionKey).
func Seal(plaintext []byte, recipientKID string, recipientPub []byte, senderKID string, senderPriv ed25519.PrivateKey) (*Sealed, error) {
	if err := checkKIDs(recipientKID, senderKID); err != nil {
		return nil, err
	}
	if len(senderPriv) != ed25519.PrivateKeySize {
		return nil, errors.New("seal: sender key is not an Ed25519 private key")
	}
	if len(recipientPub) != KeySize {
		return nil, errors.New("seal: recipient key is not a 32-byte X25519 public key")
	}
	if !canonicalX25519(recipientPub) {
		// Its holder derives the canonical bytes, which the header binds:
		// what is sealed for another spelling never opens.
		return nil, errors.New("seal: recipient key is not a canonical X25519 public key")
	}
	recipient, err := ecdh.X25519().NewPublicKey(recipientPub)
	if err != nil {
		return nil, fmt.Errorf("seal: recipient key: %w", err)
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	shared, err := eph.ECDH(recipient)
	if err != nil {
		return nil, errors.New("seal: recipient key is not a usable X25519 key")
	}
	var nonce [NonceSize]byte
	rand.Read(nonce[:])
	ephPub := eph.PublicKey().Bytes()
	aead, err := payloadAEAD(shared, ephPub, recipientPub)
	if err != nil {
		return nil, err
	}
	senderPub := senderPriv.Public().(ed25519.PublicKey)
	// One buffer holds header ‖ ciphertext: the AEAD's associated data and
	// the signed message.
	h := header(recipientKID, senderKID, recipientPub, senderPub, ephPub, nonce[:], len(plaintext)+Overhead)
	signed := aead.Seal(h, nonce[:], plaintext, h)
	ct := signed[len(h):]
	return &Sealed{
		V:            Version,
		Alg:          Alg,
		RecipientKID: recipientKID,
		SenderKID:    senderKID,
		EphemeralKey: enc.EncodeToString(ephPub),
		Nonce:        enc.EncodeToString(nonce[:]),
		Ciphertext:   enc.EncodeToString(ct),
		Sig:          enc.EncodeToString(ed25519.Sign(senderPriv, signed)),
	}, nil
}

// Open checks and decrypts s with the recipient's X25519 private key
// (32 bytes) and the sender's Ed25519 public key: it verifies the sender's
// signature first, then decrypts. It returns ErrTampered when any check
// fails, ErrUnsupported for an unknown version or algorithm, and a plain
// error for malformed keys, including a sender key of small order
// (WeakSigningKey), under which anyone could sign.
func Open(s *Sealed, recipientPriv []byte, senderPub ed25519.PublicKey) ([]byte, error) {
	if len(senderPub) != ed25519.PublicKeySize {
		return nil, errors.New("seal: sender key is not an Ed25519 public key")
	}
	if WeakSigningKey(senderPub) {
		// Anyone can sign as a key of small order: it authenticates no one.
		return nil, errors.New("seal: sender key is an Ed25519 point of small order")
	}
	if len(recipientPriv) != KeySize {
		return nil, errors.New("seal: recipient key is not a 32-byte X25519 private key")
	}
	priv, err := ecdh.X25519().NewPrivateKey(recipientPriv)
	if err != nil {
		return nil, fmt.Errorf("seal: recipient key: %w", err)
	}
	f, err := s.decode()
	if err != nil {
		return nil, err
	}
	recipientPub := priv.PublicKey().Bytes()
	h := header(s.RecipientKID, s.SenderKID, recipientPub, senderPub, f.eph, f.nonce, len(f.ct))
	signed := append(h, f.ct...)
	// An R (the signature's first half) of small order is refused as
	// libsodium and ed25519-dalek's verify_strict refuse it, so that a
	// payload opens in every client or in none; no honest signer makes one.
	if WeakSigningKey(f.sig[:32]) || !ed25519.Verify(senderPub, signed, f.sig) {
		return nil, ErrTampered
	}
	eph, err := ecdh.X25519().NewPublicKey(f.eph)
	if err != nil {
		return nil, ErrTampered
	}
	shared, err := priv.ECDH(eph)
	if err != nil {
		return nil, ErrTampered
	}
	aead, err := payloadAEAD(shared, f.eph, recipientPub)
	if err != nil {
		return nil, err
	}
	// Decrypt in place over the ciphertext copy in signed.
	ct := signed[len(h):]
	pt, err := aead.Open(ct[:0], f.nonce, ct, h)
	if err != nil {
		return nil, ErrTampered
	}
	return pt, nil
}

// Validate checks the shape of s without keys: a known version and
// algorithm, kids of 1 to 128 bytes of UTF-8, and binary fields that
// decode to their sizes. It returns ErrUnsupported or ErrTampered (wrapped
// with the field at fault). A valid shape says nothing of authenticity; only Open does.
func (s *Sealed) Validate() error {
	_, err := s.decode()
	return err
}

type fields struct {
	eph, nonce, ct, sig []byte
}

func (s *Sealed) decode() (fields, error) {
	var f fields
	if s == nil {
		return f, fmt.Errorf("%w: no sealed part", ErrTampered)
	}
	if s.V != Version || s.Alg != Alg {
		// The sender's alg, quoted (escaped) and cut: it may be any text.
		alg := s.Alg
		if len(alg) > 64 {
			alg = strings.ToValidUTF8(alg[:64], "") + "…"
		}
		return f, fmt.Errorf("%w: v %d alg %q", ErrUnsupported, s.V, alg)
	}
	if checkKIDs(s.RecipientKID, s.SenderKID) != nil {
		return f, fmt.Errorf("%w: bad kid", ErrTampered)
	}
	var err error
	if f.eph, err = decodeField(s.EphemeralKey, KeySize, KeySize); err != nil {
		return f, fmt.Errorf("%w: bad ephemeralKey", ErrTampered)
	}
	if f.nonce, err = decodeField(s.Nonce, NonceSize, NonceSize); err != nil {
		return f, fmt.Errorf("%w: bad nonce", ErrTampered)
	}
	if f.ct, err = decodeField(s.Ciphertext, Overhead, -1); err != nil {
		return f, fmt.Errorf("%w: bad ciphertext", ErrTampered)
	}
	if f.sig, err = decodeField(s.Sig, ed25519.SignatureSize, ed25519.SignatureSize); err != nil {
		return f, fmt.Errorf("%w: bad sig", ErrTampered)
	}
	return f, nil
}

// decodeField decodes a binary field of minLen to maxLen bytes (no upper
// bound when maxLen < 0). Only the one spelling of the bytes is taken:
// encoding/base64 skips CR and LF even in strict mode, so a field with a
// line break in it would decode here to the bytes it decodes to without,
// where a stricter decoder (another client's) refuses it.
func decodeField(s string, minLen, maxLen int) ([]byte, error) {
	if maxLen >= 0 && len(s) != enc.EncodedLen(maxLen) {
		return nil, errors.New("wrong length")
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if len(s) != enc.EncodedLen(len(b)) {
		return nil, errors.New("not in its one spelling")
	}
	if len(b) < minLen {
		return nil, errors.New("too short")
	}
	return b, nil
}

// checkKIDs checks that each kid is 1 to MaxKIDLen bytes of UTF-8. The
// header binds a kid's bytes, and JSON cannot carry invalid UTF-8
// (encoding/json writes U+FFFD instead), so what is sealed under such a
// kid never opens.
func checkKIDs(kids ...string) error {
	for _, k := range kids {
		if k == "" || len(k) > MaxKIDLen {
			return fmt.Errorf("seal: kid must be 1 to %d bytes", MaxKIDLen)
		}
		if !utf8.ValidString(k) {
			return errors.New("seal: kid is not valid UTF-8")
		}
	}
	return nil
}

// header returns the associated data of the AEAD, which the signature also
// covers, with spare capacity for extra bytes. It is context followed by
// each field as a 2-byte big-endian length and its bytes: alg, recipient
// kid, sender kid, recipient X25519 key, sender Ed25519 key, ephemeral
// X25519 key, nonce.
func header(recipientKID, senderKID string, recipientPub, senderPub, ephPub, nonce []byte, extra int) []byte {
	n := len(context) + 7*2 + len(Alg) + len(recipientKID) + len(senderKID) + len(recipientPub) + len(senderPub) + len(ephPub) + len(nonce)
	h := make([]byte, 0, n+extra)
	h = append(h, context...)
	for _, f := range [...][]byte{[]byte(Alg), []byte(recipientKID), []byte(senderKID), recipientPub, senderPub, ephPub, nonce} {
		h = binary.BigEndian.AppendUint16(h, uint16(len(f)))
		h = append(h, f...)
	}
	return h
}

// payloadAEAD derives the one-message key: HKDF-SHA256 with the shared
// secret as input, ephemeral ‖ recipient public key as salt, and keyInfo.
func payloadAEAD(shared, ephPub, recipientPub []byte) (cipher.AEAD, error) {
	salt := make([]byte, 0, 2*KeySize)
	salt = append(append(salt, ephPub...), recipientPub...)
	key, err := hkdf.Key(sha256.New, shared, salt, keyInfo, chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	return chacha20poly1305.NewX(key)
}
