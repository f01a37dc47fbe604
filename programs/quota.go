package programs

import (
	"fmt"

	"pigeon"
)

// DefaultMaxProgramsPerAccount is Options.MaxProgramsPerAccount when it is
// 0.
const DefaultMaxProgramsPerAccount = 32

// DefaultMaxMemoryPerAccount is Options.MaxMemoryPerAccount when it is 0:
// 4 GiB, the default program's 16 MiB instance 256 times over.
const DefaultMaxMemoryPerAccount = 4 << 30

// quota counts the programs each account runs as (their manifests'
// Account), for Options.MaxProgramsPerAccount, and the memory their
// instances may take (Manifest.Memory), for Options.MaxMemoryPerAccount:
// held and mem are the programs with a version, pending and pendingMem
// the deploys under way for the account. Guarded by Manager.mu.
type quota struct {
	held, pending   map[string]int
	mem, pendingMem map[string]int64
}

func newQuota() quota {
	return quota{held: map[string]int{}, pending: map[string]int{}, mem: map[string]int64{}, pendingMem: map[string]int64{}}
}

// reserve makes room for p to run under man, or refuses with
// PROGRAM_LIMIT_EXCEEDED when its account runs the most programs allowed,
// or when the memory its programs' instances may take would pass the
// most allowed. A new version of a program that runs as the account takes
// no place, and needs memory only beyond what its current version holds.
// The caller holds p.mu and calls release once the deploy ends, after
// recorded.
func (mg *Manager) reserve(p *program, man *Manifest) (release func(), err error) {
	account, need := man.Account, man.Memory()
	var place int
	if p.rec.Version > 0 && p.rec.Manifest.Account == account {
		need -= p.rec.Manifest.Memory()
	} else {
		place = 1
	}
	need = max(need, 0)
	mg.mu.Lock()
	defer mg.mu.Unlock()
	q := &mg.quota
	if limit := mg.opts.MaxProgramsPerAccount; place > 0 && limit >= 0 && q.held[account]+q.pending[account] >= limit {
		return nil, pigeon.NewError(pigeon.CodeProgramLimit, "account %q runs %d programs, the most allowed: remove one first", account, limit)
	}
	if limit := mg.opts.MaxMemoryPerAccount; need > 0 && limit >= 0 && q.mem[account]+q.pendingMem[account]+need > limit {
		return nil, pigeon.NewError(pigeon.CodeProgramLimit,
			"account %q: its programs' instances (route.maxInFlight × limits.memoryPages) would take up to %s, and %s is the most allowed: lower them, or remove a program first",
			account, mib(q.mem[account]+q.pendingMem[account]+need), mib(limit))
	}
	q.pending[account] += place
	q.pendingMem[account] += need
	return func() {
		mg.mu.Lock()
		defer mg.mu.Unlock()
		if q.pending[account] -= place; q.pending[account] == 0 {
			delete(q.pending, account)
		}
		if q.pendingMem[account] -= need; q.pendingMem[account] == 0 {
			delete(q.pendingMem, account)
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
		a := old.Manifest.Account
		if q.held[a]--; q.held[a] == 0 {
			delete(q.held, a)
		}
		if q.mem[a] -= old.Manifest.Memory(); q.mem[a] == 0 {
			delete(q.mem, a)
		}
	}
	if rec.Version > 0 {
		q.held[rec.Manifest.Account]++
		q.mem[rec.Manifest.Account] += rec.Manifest.Memory()
	}
}

// mib renders a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
