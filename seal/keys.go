package seal

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
)

// Keys is an account's two key pairs: an Ed25519 pair that signs (use
// "sig") and an X25519 pair that payloads are sealed for (use "enc"). The
// public halves and kids are published; the private halves never leave the
// program that generated them, and the broker never sees them.
type Keys struct {
	SigningKID     string
	SigningPublic  ed25519.PublicKey
	SigningPrivate ed25519.PrivateKey

	EncryptionKID     string
	EncryptionPublic  []byte // X25519, 32 bytes
	EncryptionPrivate []byte // X25519, 32 bytes
}

// GenerateKeys returns fresh key pairs from crypto/rand. Each kid is
// derived from its public key ("sig-" or "enc-" and 16 base64url
// characters of its SHA-256), so it is stable, distinct for distinct keys,
// and safe in URLs.
func GenerateKeys() (*Keys, error) {
	sigPub, sigPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	encPriv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	encPub := encPriv.PublicKey().Bytes()
	return &Keys{
		SigningKID:        KeyID("sig-", sigPub),
		SigningPublic:     sigPub,
		SigningPrivate:    sigPriv,
		EncryptionKID:     KeyID("enc-", encPub),
		EncryptionPublic:  encPub,
		EncryptionPrivate: encPriv.Bytes(),
	}, nil
}

// KeyID returns prefix followed by the base64url of the first 12 bytes of
// SHA-256(pub).
func KeyID(prefix string, pub []byte) string {
	sum := sha256.Sum256(pub)
	return prefix + base64.RawURLEncoding.EncodeToString(sum[:12])
}

// String names the kids only, so that printing Keys (with %v, %s or %+v)
// never shows a private key.
func (k Keys) String() string {
	return "seal.Keys{sig: " + k.SigningKID + ", enc: " + k.EncryptionKID + "}"
}

// GoString is String, for %#v.
func (k Keys) GoString() string { return k.String() }
