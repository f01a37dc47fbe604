// Package grant signs and verifies the broker's grant tokens: compact JWTs
// signed with EdDSA (Ed25519). It knows nothing of accounts, roles or
// revocation; the pigeon package keeps the grant records and decides what
// a verified token is worth.
package grant

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is the iss claim of every grant token; Verify refuses any other.
const Issuer = "pigeon"

// ErrInvalid is what Verify returns (wrapped) for a token it refuses.
var ErrInvalid = errors.New("grant: invalid token")

// ErrTooLarge is what Sign returns for claims whose token would be over
// the limits Verify and IssuedByBroker hold tokens to (MaxPayloadLen).
var ErrTooLarge = errors.New("grant: the claims are too large for a grant token")

// Size limits of a grant token, in base64url characters. A token over
// them is refused before anything in it is decoded, and Sign refuses to
// write one.
const (
	// MaxPayloadLen is the longest claims segment.
	MaxPayloadLen = 8192
	// maxHeaderLen is the longest header segment: Sign's is 36.
	maxHeaderLen = 256
	// sigLen is the length of an Ed25519 signature (64 bytes) in
	// unpadded base64url: the only length a signature segment has.
	sigLen = 86
)

// Claims is what a grant token carries.
type Claims struct {
	Subject   string // the account the grant is for
	ID        string // the grant id (jti)
	Roles     []string
	IssuedAt  time.Time // also the token's not-before
	ExpiresAt time.Time
}

type claims struct {
	Roles []string `json:"roles"`
	jwt.RegisteredClaims
}

// Sign returns the compact JWT of c, signed with key.
func Sign(key ed25519.PrivateKey, c Claims) (string, error) {
	cl := claims{Roles: c.Roles, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: Issuer, Subject: c.Subject, ID: c.ID,
		IssuedAt: jwt.NewNumericDate(c.IssuedAt), NotBefore: jwt.NewNumericDate(c.IssuedAt), ExpiresAt: jwt.NewNumericDate(c.ExpiresAt),
	}}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, cl).SignedString(key)
	if err != nil {
		return "", err
	}
	if !canonicalShape(tok) {
		return "", ErrTooLarge
	}
	return tok, nil
}

// canonicalShape reports whether tok is three segments of unpadded
// base64url, within the size limits, with a signature segment of exactly
// sigLen characters. Together with strict decoding (no unused bits set in
// a segment's last character) it leaves a grant token one spelling: the
// base64 decoder would otherwise skip line breaks and ignore unused bits,
// so that many strings would verify as the same token.
func canonicalShape(tok string) bool {
	header, rest, ok1 := strings.Cut(tok, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || len(header) == 0 || len(header) > maxHeaderLen ||
		len(payload) == 0 || len(payload) > MaxPayloadLen || len(sig) != sigLen {
		return false
	}
	return isBase64URL(header) && isBase64URL(payload) && isBase64URL(sig)
}

// isBase64URL reports whether s holds only the characters of the
// base64url alphabet (RFC 4648 section 5), without padding.
func isBase64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// MaxClockSkew is how far ahead of the verifying clock a token's nbf may
// be: in a cluster, the node that issued a token may run a little ahead of
// the one that verifies it a moment later. A token's expiry has no leeway.
const MaxClockSkew = 5 * time.Second

// Verify checks tok: EdDSA signed by the private half of pub, issued by
// Issuer, with an expiry that has not passed at now(). Any other algorithm
// (none, HS256, RS256) is refused before the signature is looked at. A
// token is accepted only as Sign spelled it: unpadded base64url segments
// with no unused bits set and nothing else (no line breaks, no trailing
// data), within the size limits, which are checked before anything is
// decoded. The refusal wraps ErrInvalid.
func Verify(tok string, pub ed25519.PublicKey, now func() time.Time) (Claims, error) {
	if !canonicalShape(tok) {
		return Claims{}, fmt.Errorf("%w: not a grant token's shape", ErrInvalid)
	}
	var cl claims
	// The leeway lets nbf (and iat) be up to MaxClockSkew ahead of this
	// clock; the expiry gets none, checked below.
	at := now()
	_, err := jwt.ParseWithClaims(tok, &cl, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return at }), jwt.WithLeeway(MaxClockSkew),
		jwt.WithStrictDecoding())
	if err != nil {
		return Claims{}, errors.Join(ErrInvalid, err)
	}
	if !at.Before(cl.ExpiresAt.Time) {
		return Claims{}, fmt.Errorf("%w: token is expired", ErrInvalid)
	}
	out := Claims{Subject: cl.Subject, ID: cl.ID, Roles: cl.Roles}
	if cl.IssuedAt != nil {
		out.IssuedAt = cl.IssuedAt.Time
	}
	out.ExpiresAt = cl.ExpiresAt.Time // required above
	return out, nil
}

// LooksLikeJWT reports whether a credential has the shape of a compact JWS.
func LooksLikeJWT(s string) bool {
	return strings.HasPrefix(s, "eyJ") && strings.Count(s, ".") == 2
}

// IssuedByBroker reports whether tok has the shape of a JWT whose unverified
// iss claim is Issuer: a token that only Verify may judge. It verifies
// nothing; it only routes a credential to the right verifier.
func IssuedByBroker(tok string) bool {
	if !LooksLikeJWT(tok) {
		return false
	}
	_, rest, _ := strings.Cut(tok, ".")
	payload, _, _ := strings.Cut(rest, ".")
	if len(payload) > MaxPayloadLen {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return false
	}
	var c struct {
		Iss any `json:"iss"`
	}
	if json.Unmarshal(b, &c) != nil {
		return false
	}
	return c.Iss == Issuer
}
