package pigeon

import "time"

// The directory's quotas: how many accounts and roles it holds, and how
// many live grants an account holds (Options.MaxAccounts, MaxRoles,
// MaxGrantsPerAccount). Every node keeps the whole directory in memory
// and in its store, so without them an admin (or a stolen admin token)
// could grow both without end. A quota refuses a creation only: a change
// of what the directory holds goes on, and a store that holds more than a
// quota (written before it, or under a larger one) loads whole, since
// skipping a record could lose an account, a role or a grant someone
// relies on.

// directoryQuota holds the quotas of a directory; a quota of 0 or below
// is none (the engine sets Options' defaults, where 0 is the default).
type directoryQuota struct {
	accounts int // accounts the directory holds
	roles    int // roles the directory holds
	grants   int // live (unexpired, unrevoked) grants of one account
}

// accountQuota refuses a new account when the directory holds as many as
// its quota, or more (INVALID_ARGUMENT). d.mu is held.
func (d *directory) accountQuota() error {
	if q := d.quota.accounts; q > 0 && len(d.accounts) >= q {
		return NewError(CodeInvalidArgument, "the directory holds %d accounts, and takes at most %d (Options.MaxAccounts; pigeon serve --max-accounts): delete one first", len(d.accounts), q)
	}
	return nil
}

// roleQuota refuses a new role when the directory holds as many as its
// quota, or more (INVALID_ARGUMENT). d.mu is held.
func (d *directory) roleQuota() error {
	if q := d.quota.roles; q > 0 && len(d.roles) >= q {
		return NewError(CodeInvalidArgument, "the directory holds %d roles, and takes at most %d (Options.MaxRoles; pigeon serve --max-roles): delete one first", len(d.roles), q)
	}
	return nil
}

// grantQuota refuses a new grant of account a when a holds as many live
// grants at now as its quota, or more (INVALID_ARGUMENT). d.mu is held.
func (d *directory) grantQuota(a *Account, now time.Time) error {
	q := d.quota.grants
	if q <= 0 {
		return nil
	}
	if n := d.liveGrants(a, now); n >= q {
		return NewError(CodeInvalidArgument, "account %s holds %d live grants, and takes at most %d (Options.MaxGrantsPerAccount; pigeon serve --max-grants-per-account): revoke one or wait for one to expire", a.ID, n, q)
	}
	return nil
}

// liveGrants counts the grants of account a (issued to a itself, not to
// an earlier account of its id) that are neither revoked nor expired at
// now: the grants its tokens are good for. It reads the grants of a's id
// alone (grantsOf). d.mu is held.
func (d *directory) liveGrants(a *Account, now time.Time) int {
	n := 0
	for jti := range d.grantsOf[a.ID] {
		g := d.grants[jti]
		if _, revoked := d.revoked[jti]; revoked || g == nil || !g.of(a) || !now.Before(g.ExpiresAt) {
			continue
		}
		n++
	}
	return n
}
