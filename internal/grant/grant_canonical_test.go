package grant_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"pigeon/internal/grant"
)

const b64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// A grant token has one spelling: the one Sign wrote. Before, base64url
// decoding ignored the unused low bits of the signature's last character,
// and line breaks anywhere in it, so each token had many spellings that
// all authenticated (and one with a trailing CRLF did too); and a token
// of any size was decoded before its signature was looked at.
func TestGrantTokenHasOneSpelling(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { return now }
	tok, err := grant.Sign(priv, grant.Claims{Subject: "s", ID: "gr_1", Roles: []string{"a"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	_, err = grant.Verify(tok, pub, clock)
	require.NoError(t, err, "the token as signed")
	parts := strings.Split(tok, ".")
	require.Len(t, parts[2], 86, "an Ed25519 signature in unpadded base64url")

	last := strings.IndexByte(b64url, tok[len(tok)-1])
	require.GreaterOrEqual(t, last, 0)
	// A payload over the limit, signed with the right key.
	big, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": grant.Issuer, "sub": "s", "jti": "gr_1", "exp": now.Add(time.Hour).Unix(),
		"roles": []string{strings.Repeat("r", grant.MaxPayloadLen)},
	}).SignedString(priv)
	require.NoError(t, err)

	for _, tc := range []struct{ name, tok string }{
		{"unused bits of the signature set", tok[:len(tok)-1] + string(b64url[last^1])},
		{"line break in the signature", parts[0] + "." + parts[1] + "." + parts[2][:40] + "\n" + parts[2][40:]},
		{"carriage return in the signature", parts[0] + "." + parts[1] + "." + parts[2][:40] + "\r" + parts[2][40:]},
		{"trailing CRLF", tok + "\r\n"},
		{"padded signature", tok + "=="},
		{"trailing space", tok + " "},
		{"signature cut short", tok[:len(tok)-2]},
		{"payload over the limit", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := grant.Verify(tc.tok, pub, clock)
			require.ErrorIs(t, err, grant.ErrInvalid)
		})
	}
}

// Sign refuses claims whose token Verify would refuse for its size, so no
// grant is handed out that cannot authenticate.
func TestGrantSignRefusesClaimsTooLarge(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { return now }
	claims := func(n int) grant.Claims {
		roles := make([]string, n)
		for i := range roles {
			roles[i] = strings.Repeat("r", 200) + strings.Repeat("x", i)
		}
		return grant.Claims{Subject: "s", ID: "gr_1", Roles: roles, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	}
	tok, err := grant.Sign(priv, claims(20))
	require.NoError(t, err)
	_, err = grant.Verify(tok, pub, clock)
	require.NoError(t, err, "a token under the limit verifies")
	require.True(t, grant.IssuedByBroker(tok))

	_, err = grant.Sign(priv, claims(40))
	require.ErrorIs(t, err, grant.ErrTooLarge)
}
