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
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is the iss claim of every grant token; Verify refuses any other.
const Issuer = "pigeon"

// ErrInvalid is what Verify returns (wrapped) for a token it refuses.
var ErrInvalid = errors.New("grant: invalid token")

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
	return jwt.NewWithClaims(jwt.SigningMethodEdDSA, cl).SignedString(key)
}

// Verify checks tok: EdDSA signed by the private half of pub, issued by
// Issuer, with an expiry that has not passed at now(). Any other algorithm
// (none, HS256, RS256) is refused before the signature is looked at. The
// refusal wraps ErrInvalid.
func Verify(tok string, pub ed25519.PublicKey, now func() time.Time) (Claims, error) {
	var cl claims
	_, err := jwt.ParseWithClaims(tok, &cl, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}), jwt.WithIssuer(Issuer),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(now))
	if err != nil {
		return Claims{}, errors.Join(ErrInvalid, err)
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
	if len(payload) > 8192 {
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
