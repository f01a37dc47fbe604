package programs

import (
	"fmt"

	"pigeon"
)

// DefaultMaxProgramsPerAccount is Options.MaxProgramsPerAccount when it is
// 0.
const DefaultMaxProgramsPerAccount = 32

// DefaultMaxMemoryPerAccount is Options.MaxMemoryPerAccount when it is 0:
// 4 GiB, the default program's instance (16 MiB of linear memory and the
// StackReserve of 144 MiB) 25 times over.
const DefaultMaxMemoryPerAccount = 4 << 30

// quota counts what each account's programs (their manifests' Account)
// take: how many, for Options.MaxProgramsPerAccount, and the memory their
// instances may take (Manifest.Memory), for Options.MaxMemoryPerAccount.
// held counts the programs with a version, pending the deploys under way.
// Guarded by Manager.mu.
type quota struct {
	held, pending map[string]usage
}

// usage is what one account's programs take.
type usage struct {
	programs int
	memory   int64
}

func (u usage) plus(o usage) usage { return usage{u.programs + o.programs, u.memory + o.memory} }

func (u usage) minus(o usage) usage { return usage{u.programs - o.programs, u.memory - o.memory} }

// of is what a program recorded as rec takes (nothing without a version).
func of(rec *record) usage {
	if rec.Version == 0 {
		return usage{}
	}
	return usage{1, rec.Manifest.Memory()}
}

func newQuota() quota { return quota{held: map[string]usage{}, pending: map[string]usage{}} }

// add adds u to account's entry of m, dropping an entry that comes to
// nothing.
func add(m map[string]usage, account string, u usage) {
	if v := m[account].plus(u); v == (usage{}) {
		delete(m, account)
	} else {
		m[account] = v
	}
}

// reservation is the room reserve made for one deploy, pending until
// the deploy records its program (recorded) or ends without it (release).
type reservation struct {
	account string
	need    usage
	done    bool // guarded by Manager.mu
}

// reserve makes room for p to run under man, or refuses with
// PROGRAM_LIMIT_EXCEEDED when its account runs the most programs allowed,
// or when the memory its programs' instances may take would pass the
// most allowed. A new version of a program that runs as the account takes
// no place, and needs memory only beyond what its current version holds.
// The caller holds p.mu and calls release once the deploy ends; a deploy
// that records its program hands the room over to it in recorded, so no
// other deploy sees it counted twice.
func (mg *Manager) reserve(p *program, man *Manifest) (*reservation, error) {
	account := man.Account
	need := usage{1, man.Memory()}
	if p.rec.Manifest.Account == account {
		need = need.minus(of(&p.rec))
	}
	need.memory = max(need.memory, 0)
	mg.mu.Lock()
	defer mg.mu.Unlock()
	q := &mg.quota
	taken := q.held[account].plus(q.pending[account])
	if limit := mg.opts.MaxProgramsPerAccount; need.programs > 0 && limit >= 0 && taken.programs >= limit {
		return nil, pigeon.NewError(pigeon.CodeProgramLimit, "account %q runs %d programs, the most allowed: remove one first", account, limit)
	}
	if limit := mg.opts.MaxMemoryPerAccount; need.memory > 0 && limit >= 0 && taken.memory+need.memory > limit {
		return nil, pigeon.NewError(pigeon.CodeProgramLimit,
			"account %q: its programs' instances (route.maxInFlight × (limits.memoryPages + a call stack reserve)) would take up to %s, and %s is the most allowed: lower them, or remove a program first",
			account, mib(taken.memory+need.memory), mib(limit))
	}
	add(q.pending, account, need)
	return &reservation{account: account, need: need}, nil
}

// release gives back the room of r unless recorded took it over.
// Idempotent.
func (mg *Manager) release(r *reservation) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	mg.settle(r)
}

// settle drops r from the pending counts once. mg.mu is held.
func (mg *Manager) settle(r *reservation) {
	if r == nil || r.done {
		return
	}
	r.done = true
	add(mg.quota.pending, r.account, usage{}.minus(r.need))
}

// recorded counts a program whose stored record changes from old to rec
// (a zero Version: none), settling the deploy's reservation r (nil when
// none) in the same step.
func (mg *Manager) recorded(old, rec *record, r *reservation) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	mg.settle(r)
	add(mg.quota.held, old.Manifest.Account, usage{}.minus(of(old)))
	add(mg.quota.held, rec.Manifest.Account, of(rec))
}

// mib renders a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
