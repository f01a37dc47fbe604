package identity_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/identity"
)

// TestOIDCTokenLifetimeIsCapped: a token that lives longer than the
// issuer's MaxLifetime (default 24 h), counted from its iat or, whatever
// its iat says, from the moment it is presented, is refused; the leeway
// applies. A provider issuing year-long tokens, or a token minted for
// another use, does not sign in for as long as it says.
func TestOIDCTokenLifetimeIsCapped(t *testing.T) {
	f := newOIDCFixture(t, false)
	now := f.clk.Now()
	for _, tc := range []struct {
		name     string
		most     time.Duration // the issuer's MaxLifetime; 0: the default
		iat, exp time.Time     // zero iat: no iat claim
		ok       bool
	}{
		{"an hour", 0, now, now.Add(time.Hour), true},
		{"just under a day", 0, now, now.Add(24*time.Hour - time.Minute), true},
		{"a day and the leeway", 0, now, now.Add(24*time.Hour + identity.DefaultLeeway), true},
		{"just beyond a day and the leeway", 0, now, now.Add(24*time.Hour + identity.DefaultLeeway + 2*time.Second), false},
		{"a year", 0, now, now.AddDate(1, 0, 0), false},
		{"the year 9999", 0, now, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"no iat, an hour left", 0, time.Time{}, now.Add(time.Hour), true},
		{"no iat, a year left", 0, time.Time{}, now.AddDate(1, 0, 0), false},
		{"an old iat: a two-day token with an hour left", 0, now.Add(-47 * time.Hour), now.Add(time.Hour), false},
		{"an iat in the past hiding a long life left", 0, now.AddDate(0, 0, -1), now.Add(23 * time.Hour), false},
		{"a configured cap of 10 minutes: 5", 10 * time.Minute, now, now.Add(5 * time.Minute), true},
		{"a configured cap of 10 minutes: an hour", 10 * time.Minute, now, now.Add(time.Hour), false},
		{"a configured cap of 30 days: 29", 30 * 24 * time.Hour, now, now.AddDate(0, 0, 29), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := identity.NewOIDC(&identity.OIDCOptions{Now: f.clk.Now, Issuers: []identity.Issuer{
				{URL: f.p.srv.URL, Audiences: []string{"pigeon"}, JWKSURL: f.p.srv.URL + "/jwks", MaxLifetime: tc.most}}})
			require.NoError(t, err)
			claims := f.p.good("user-1")
			delete(claims, "nbf")
			claims["exp"] = tc.exp.Unix()
			if tc.iat.IsZero() {
				delete(claims, "iat")
			} else {
				claims["iat"] = tc.iat.Unix()
			}
			p, err := m.AuthenticateCredential(context.Background(), pigeon.Credential{Bearer: f.p.sign(t, "rsa-1", claims)})
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, "user-1", p.ID)
				return
			}
			require.Equal(t, pigeon.CodeUnauthenticated, pigeon.ErrorCode(err), "%v", err)
			require.Contains(t, err.Error(), "max lifetime")
			require.Nil(t, p)
		})
	}
}

// TestOIDCMaxLifetimeConfig: a negative cap, or one beyond 366 days, is
// refused at start; none is the default.
func TestOIDCMaxLifetimeConfig(t *testing.T) {
	for _, tc := range []struct {
		most time.Duration
		ok   bool
	}{
		{0, true}, {time.Minute, true}, {identity.MostMaxLifetime, true},
		{-time.Second, false}, {identity.MostMaxLifetime + time.Second, false},
	} {
		in := identity.Issuer{URL: "https://idp.example", Audiences: []string{"a"}, MaxLifetime: tc.most}
		got, err := identity.CheckIssuer(in)
		if !tc.ok {
			require.ErrorContains(t, err, "max lifetime", "%s", tc.most)
			continue
		}
		require.NoError(t, err, "%s", tc.most)
		if tc.most == 0 {
			require.Equal(t, identity.DefaultMaxLifetime, got.MaxLifetime)
		}
	}
}
