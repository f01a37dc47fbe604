package pigeon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDirectoryQuotaOptions: the engine gives its directory the quotas
// of its Options: zero is the default, a negative quota is none.
func TestDirectoryQuotaOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want directoryQuota
	}{
		{"zero: the defaults", Options{}, directoryQuota{accounts: DefaultMaxAccounts, roles: DefaultMaxRoles, grants: DefaultMaxGrantsPerAccount}},
		{"set", Options{MaxAccounts: 5, MaxRoles: 6, MaxGrantsPerAccount: 7}, directoryQuota{accounts: 5, roles: 6, grants: 7}},
		{"negative: none", Options{MaxAccounts: -1, MaxRoles: -2, MaxGrantsPerAccount: -3}, directoryQuota{accounts: -1, roles: -2, grants: -3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, err := New(ctx, &tc.o)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
			require.Equal(t, tc.want, e.dir.quota)
		})
	}
}

// TestDirectoryQuotaOfNoneRefusesNothing: a quota of 0 or below refuses
// no creation, however many the directory holds; a quota refuses once
// the directory holds as many, or more.
func TestDirectoryQuotaOfNoneRefusesNothing(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := &Account{ID: "svc", CreatedAt: now}
	d := directory{accounts: map[string]*Account{"svc": a}, roles: map[string]*Role{"r": {Name: "r"}},
		grants: map[string]*grantRecord{}, revoked: map[string]time.Time{}}
	d.putGrant(&grantRecord{JTI: "gr_1", Account: "svc", IssuedAt: now, ExpiresAt: now.Add(time.Hour), AccountCreatedAt: now})
	for _, q := range []int{0, -1} {
		d.quota = directoryQuota{accounts: q, roles: q, grants: q}
		require.NoError(t, d.accountQuota())
		require.NoError(t, d.roleQuota())
		require.NoError(t, d.grantQuota(a, now))
	}
	d.quota = directoryQuota{accounts: 1, roles: 1, grants: 1}
	require.Equal(t, CodeInvalidArgument, ErrorCode(d.accountQuota()))
	require.Equal(t, CodeInvalidArgument, ErrorCode(d.roleQuota()))
	require.Equal(t, CodeInvalidArgument, ErrorCode(d.grantQuota(a, now)))
	require.NoError(t, d.grantQuota(a, now.Add(time.Hour)), "expired at its expiry")
	later := &Account{ID: "svc", CreatedAt: now.Add(time.Minute)}
	require.NoError(t, d.grantQuota(later, now), "a grant of an earlier account of the id is not the account's")
	d.revoked["gr_1"] = now.Add(time.Hour)
	require.NoError(t, d.grantQuota(a, now), "a revoked grant is not live")
}

// TestGrantIndexFollowsTheGrants: the index of grants by account
// (grantsOf) holds the jti of every grant the directory holds, under its
// account, as grants are put, dropped and read again, and no account
// whose grants are all gone.
func TestGrantIndexFollowsTheGrants(t *testing.T) {
	d := directory{grants: map[string]*grantRecord{}}
	d.putGrant(&grantRecord{JTI: "gr_1", Account: "a"})
	d.putGrant(&grantRecord{JTI: "gr_2", Account: "a"})
	d.putGrant(&grantRecord{JTI: "gr_3", Account: "b"})
	require.Equal(t, map[string]map[string]struct{}{"a": {"gr_1": {}, "gr_2": {}}, "b": {"gr_3": {}}}, d.grantsOf)
	d.dropGrant("gr_1")
	d.dropGrant("gr_3")
	d.dropGrant("gr_none")
	require.Equal(t, map[string]map[string]struct{}{"a": {"gr_2": {}}}, d.grantsOf)
	require.Len(t, d.grants, 1)
}
