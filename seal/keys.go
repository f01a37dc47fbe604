package seal

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
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

// Format prints String for every verb. fmt calls String only for %v, %s,
// %q, %x and %X; with any other verb (%d, %o, %b, %c, %U, %e, %t, …) it
// would print the fields one by one, the private keys included, and so
// would it for a value that holds a Keys. %q, %x and %X format String as
// they format a string.
func (k Keys) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q', 'x', 'X':
		fmt.Fprintf(f, fmt.FormatString(f, verb), k.String())
	default:
		io.WriteString(f, k.String())
	}
}

// LogValue names the kids only, so that logging Keys with log/slog never
// shows a private key: the JSON handler does not print a value but
// marshals it with encoding/json, which would write the private halves.
// encoding/json itself still writes them, for programs that store their
// keys.
func (k Keys) LogValue() slog.Value {
	return slog.GroupValue(slog.String("sig", k.SigningKID), slog.String("enc", k.EncryptionKID))
}

// smallOrderEd25519 are the encodings of the Ed25519 points of small order
// (the torsion points) that crypto/ed25519 accepts as public keys, without
// their sign bit: 0 (order 4), 1 (the identity), the two y of the points of
// order 8, p-1 (order 2), and the non-canonical p (= 0) and p+1 (= 1). With
// the sign bit they are all fourteen such encodings.
var smallOrderEd25519 = [...][32]byte{
	{},
	{0x01},
	{0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
	{0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a},
	{0xec, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	{0xed, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	{0xee, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
}

// WeakSigningKey reports whether pub, an Ed25519 public key, is a point of
// small order. Such a key proves nothing: crypto/ed25519 accepts, under the
// identity point for one, the same 64 bytes as a signature of every message,
// so anyone can sign as its holder. A key made by ed25519.GenerateKey is
// never weak. A key of the wrong length is not weak (it is malformed).
func WeakSigningKey(pub []byte) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	var k [32]byte
	copy(k[:], pub)
	k[31] &= 0x7f
	for _, w := range smallOrderEd25519 {
		if k == w {
			return true
		}
	}
	return false
}

// probe is a fixed X25519 private key that WeakEncryptionKey agrees a
// secret with.
var probe = func() *ecdh.PrivateKey {
	seed := sha256.Sum256([]byte("pigeon-seal-v1 low-order probe"))
	k, err := ecdh.X25519().NewPrivateKey(seed[:])
	if err != nil {
		panic(err)
	}
	return k
}()

// WeakEncryptionKey reports whether pub, a 32-byte X25519 public key, is
// unusable: of low order (every secret agreed with it is zero), or spelled
// other than as its holder's private key spells it (the top bit set, which
// X25519 ignores, or u at or above 2^255-19). A payload sealed for a
// non-canonical spelling never opens: the header and key derivation bind
// the bytes as given, and Open binds the canonical ones. Seal refuses such
// a key. A key of the wrong length is not weak (it is malformed).
func WeakEncryptionKey(pub []byte) bool {
	if len(pub) != KeySize {
		return false
	}
	if !canonicalX25519(pub) {
		return true
	}
	k, err := ecdh.X25519().NewPublicKey(pub)
	if err != nil {
		return true
	}
	_, err = probe.ECDH(k)
	return err != nil
}

// canonicalX25519 reports whether the 32-byte little-endian u is below
// p = 2^255-19, which also means its top bit is clear.
func canonicalX25519(u []byte) bool {
	if u[31] != 0x7f {
		return u[31] < 0x7f
	}
	for _, b := range u[1:31] {
		if b != 0xff {
			return true
		}
	}
	return u[0] < 0xed
}
