package programs

import "pigeon"

// DefaultMaxProgramsPerAccount is Options.MaxProgramsPerAccount when it is
// 0.
const DefaultMaxProgramsPerAccount = 32

// quota counts the programs each account runs as (their manifests'
// Account), for Options.MaxProgramsPerAccount: held are the programs with
// a version, pending the first deploys under way for the account. Guarded
// by Manager.mu.
type quota struct {
	held, pending map[string]int
}

// reserve makes room for p to run as account, or refuses with
// PROGRAM_LIMIT_EXCEEDED when the account runs the most programs allowed.
// A program that runs as account already needs no room. The caller holds
// p.mu and calls release once the deploy ends, after recorded.
func (mg *Manager) reserve(p *program, account string) (release func(), err error) {
	if p.rec.Version > 0 && p.rec.Manifest.Account == account {
		return func() {}, nil
	}
	mg.mu.Lock()
	defer mg.mu.Unlock()
	q := &mg.quota
	if limit := mg.opts.MaxProgramsPerAccount; limit >= 0 && q.held[account]+q.pending[account] >= limit {
		return nil, pigeon.NewError(pigeon.CodeProgramLimit, "account %q runs %d programs, the most allowed: remove one first", account, limit)
	}
	q.pending[account]++
	return func() {
		mg.mu.Lock()
		defer mg.mu.Unlock()
		if q.pending[account]--; q.pending[account] == 0 {
			delete(q.pending, account)
		}
	}, nil
}

// recorded counts a program whose stored record changes from old to rec
// (a zero Version: none).
func (mg *Manager) recorded(old, rec *record) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	q := &mg.quota
	if old.Version > 0 {
		if q.held[old.Manifest.Account]--; q.held[old.Manifest.Account] == 0 {
			delete(q.held, old.Manifest.Account)
		}
	}
	if rec.Version > 0 {
		q.held[rec.Manifest.Account]++
	}
}
