package grant_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"pigeon/internal/grant"
)

func TestSignVerify(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { return now }
	c := grant.Claims{Subject: "spiffe://chat/carol", ID: "gr_1", Roles: []string{"a", "b"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}
	tok, err := grant.Sign(priv, c)
	require.NoError(t, err)
	require.True(t, grant.LooksLikeJWT(tok))

	got, err := grant.Verify(tok, pub, clock)
	require.NoError(t, err)
	require.Equal(t, c.Subject, got.Subject)
	require.Equal(t, c.ID, got.ID)
	require.Equal(t, c.Roles, got.Roles)
	require.True(t, c.IssuedAt.Equal(got.IssuedAt))
	require.True(t, c.ExpiresAt.Equal(got.ExpiresAt))

	later := func() time.Time { return now.Add(time.Hour) }
	_, err = grant.Verify(tok, pub, later)
	require.ErrorIs(t, err, grant.ErrInvalid, "expired")

	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	_, err = grant.Verify(tok, otherPub, clock)
	require.ErrorIs(t, err, grant.ErrInvalid, "another key")
}

func TestVerifyRefuses(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	clock := func() time.Time { return now }
	claims := func(iss string, exp bool) jwt.MapClaims {
		m := jwt.MapClaims{"iss": iss, "sub": "x", "jti": "gr_1", "roles": []string{"admin"}}
		if exp {
			m["exp"] = now.Add(time.Hour).Unix()
		}
		return m
	}
	sign := func(m jwt.SigningMethod, c jwt.MapClaims, key any) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		require.NoError(t, err)
		return s
	}
	for name, tok := range map[string]string{
		"none":         sign(jwt.SigningMethodNone, claims(grant.Issuer, true), jwt.UnsafeAllowNoneSignatureType),
		"HS256":        sign(jwt.SigningMethodHS256, claims(grant.Issuer, true), []byte("guess")),
		"other issuer": sign(jwt.SigningMethodEdDSA, claims("someone", true), priv),
		"no expiry":    sign(jwt.SigningMethodEdDSA, claims(grant.Issuer, false), priv),
		"garbage":      "eyJ.x.y",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := grant.Verify(tok, pub, clock)
			require.ErrorIs(t, err, grant.ErrInvalid)
		})
	}
}

func TestLooksLikeJWT(t *testing.T) {
	require.True(t, grant.LooksLikeJWT("eyJa.b.c"))
	require.False(t, grant.LooksLikeJWT("eyJa.b"))
	require.False(t, grant.LooksLikeJWT("orders-token"))
}

func TestIssuedByBroker(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	tok, err := grant.Sign(priv, grant.Claims{Subject: "s", ID: "gr_1", Roles: []string{"a"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, grant.IssuedByBroker(tok))
	other, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: "https://idp.example"}).SignedString(priv)
	require.NoError(t, err)
	require.False(t, grant.IssuedByBroker(other), "another issuer's JWT")
	for _, s := range []string{"", "static-token", "eyJ.eyJ.x", "eyJhbGciOiJub25lIn0.!!!.x"} {
		require.False(t, grant.IssuedByBroker(s), s)
	}
}

// A token is valid from its nbf (its issue time, in whole seconds) on, give
// or take MaxClockSkew: a broker of a cluster whose clock runs a little
// behind the one that issued the token accepts it at once, rather than
// refusing a token issued a moment ago on another node. Its expiry has no
// such leeway: a grant ends at its exp on every node.
func TestVerifyClockSkew(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	issued := time.Now().UTC().Truncate(time.Second)
	tok, err := grant.Sign(priv, grant.Claims{Subject: "s", ID: "gr_1", Roles: []string{"a"}, IssuedAt: issued, ExpiresAt: issued.Add(time.Minute)})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		at   time.Time
		ok   bool
	}{
		{"at issue", issued, true},
		{"a clock a second behind", issued.Add(-time.Second), true},
		{"a clock MaxClockSkew behind", issued.Add(-grant.MaxClockSkew), true},
		{"before issue beyond the skew", issued.Add(-grant.MaxClockSkew - time.Second), false},
		{"just before expiry", issued.Add(time.Minute - time.Millisecond), true},
		{"at expiry", issued.Add(time.Minute), false},
		{"a second after expiry", issued.Add(time.Minute + time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := grant.Verify(tok, pub, func() time.Time { return tc.at })
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, grant.ErrInvalid)
		})
	}
}
