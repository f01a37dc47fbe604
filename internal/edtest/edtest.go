// Package edtest builds Ed25519 signatures no honest signer makes, for
// tests of the verifiers that must refuse them.
package edtest

import (
	"crypto/ed25519"
	"crypto/sha512"
	"math/big"
	"slices"
)

// order is L, the order of the Ed25519 base point.
var order, _ = new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)

// SignWithIdentityR signs msg with seed's key as a signer who picks the
// nonce point R itself: R is the identity point (of order 1) and S = k·a
// mod L, so that [S]B = R + [k]A holds and crypto/ed25519 accepts the
// signature, while libsodium and ed25519-dalek's verify_strict refuse it.
// An honest signer's R = [r]B is never of small order.
func SignWithIdentityR(seed, msg []byte) []byte {
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	h := sha512.Sum512(seed)
	h[0] &= 248
	h[31] &= 127
	h[31] |= 64
	r := append([]byte{1}, make([]byte, 31)...) // the identity point
	d := sha512.New()
	d.Write(r)
	d.Write(pub)
	d.Write(msg)
	k := new(big.Int).Mod(littleEndian(d.Sum(nil)), order)
	s := new(big.Int).Mod(new(big.Int).Mul(k, littleEndian(h[:32])), order)
	sb := s.FillBytes(make([]byte, 32))
	slices.Reverse(sb)
	return append(r, sb...)
}

func littleEndian(b []byte) *big.Int {
	be := slices.Clone(b)
	slices.Reverse(be)
	return new(big.Int).SetBytes(be)
}
