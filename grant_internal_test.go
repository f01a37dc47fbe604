package pigeon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A grant record counts for an account only when it was issued to that
// very account: the same creation time, or, for a record written before
// the creation time was kept, issued after the account was created.
func TestGrantIsOfItsAccount(t *testing.T) {
	created := time.Date(2026, 12, 1, 12, 0, 0, 500_000_000, time.UTC)
	acct := &Account{ID: "svc", CreatedAt: created}
	for _, tc := range []struct {
		name string
		g    grantRecord
		of   bool
	}{
		{"same account", grantRecord{AccountCreatedAt: created, IssuedAt: created.Add(time.Hour)}, true},
		{"same instant in another zone", grantRecord{AccountCreatedAt: created.In(time.FixedZone("x", 3600))}, true},
		{"an earlier account of the id", grantRecord{AccountCreatedAt: created.Add(-time.Hour), IssuedAt: created.Add(time.Hour)}, false},
		{"a later account of the id", grantRecord{AccountCreatedAt: created.Add(time.Nanosecond)}, false},
		{"old record issued after creation", grantRecord{IssuedAt: created.Add(time.Second).Truncate(time.Second)}, true},
		{"old record issued in the creation's second", grantRecord{IssuedAt: created.Truncate(time.Second)}, true},
		{"old record issued before creation", grantRecord{IssuedAt: created.Add(-time.Second).Truncate(time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.of, tc.g.of(acct))
		})
	}
}

// The store's grant of a deleted account, left behind by a broker that did
// not delete it (or by a store that failed between the two deletes), does
// not count for an account created again under its id.
func TestLeftoverGrantRefused(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := directory{accounts: map[string]*Account{}, grants: map[string]*grantRecord{}, revoked: map[string]time.Time{}}
	d.accounts["svc"] = &Account{ID: "svc", Roles: []string{"member"}, CreatedAt: now}
	d.grants["gr_old"] = &grantRecord{JTI: "gr_old", Account: "svc", Roles: []string{"member"}, IssuedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour), AccountCreatedAt: now.Add(-2 * time.Hour)}
	d.grants["gr_new"] = &grantRecord{JTI: "gr_new", Account: "svc", Roles: []string{"member"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour), AccountCreatedAt: now}
	_, code := d.effectiveRoles("svc", nil, "gr_old", now.Add(time.Minute))
	require.Equal(t, CodeGrantRevoked, code)
	roles, code := d.effectiveRoles("svc", nil, "gr_new", now.Add(time.Minute))
	require.Equal(t, CodeOK, code)
	require.Equal(t, []string{"member"}, roles)
}

// A grant record counts only for the account it was issued to, whatever
// the principal that presents its id: the broker signs a token's sub and
// jti together, but the directory does not lean on that. Two accounts
// created in the same instant would otherwise pass the creation-time check
// for each other's grants.
func TestGrantOfAnotherAccountRefused(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	d := directory{accounts: map[string]*Account{}, grants: map[string]*grantRecord{}, revoked: map[string]time.Time{}}
	d.accounts["svc"] = &Account{ID: "svc", Roles: []string{"member", "admin"}, CreatedAt: now}
	d.accounts["other"] = &Account{ID: "other", Roles: []string{"member", "admin"}, CreatedAt: now}
	d.grants["gr_svc"] = &grantRecord{JTI: "gr_svc", Account: "svc", Roles: []string{"admin"}, IssuedAt: now, ExpiresAt: now.Add(time.Hour), AccountCreatedAt: now}
	_, code := d.effectiveRoles("other", nil, "gr_svc", now.Add(time.Minute))
	require.Equal(t, CodeGrantRevoked, code)
	roles, code := d.effectiveRoles("svc", nil, "gr_svc", now.Add(time.Minute))
	require.Equal(t, CodeOK, code)
	require.Equal(t, []string{"admin"}, roles)
}
