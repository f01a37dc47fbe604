package pigeon

import (
	"context"
	"crypto/ed25519"
	"slices"

	"pigeon/store"
)

// Test-only exports: what the external tests (package pigeon_test) need of
// the package's internals, kept out of the public API.

// NewAdmission prepares what the gates see of m published by c, without
// running any gate: for testing and benchmarking gates.
func (e *Engine) NewAdmission(c Caller, m *Message) *Admission {
	a := new(Admission)
	e.prepare(a, c, m)
	return a
}

// Gates returns the engine's admission chain, in order.
func (e *Engine) Gates() []Gate { return append([]Gate(nil), e.gates...) }

// Tokens returns a copy of the configured tokens.
func (s *StaticTokens) Tokens() []StaticToken { return slices.Clone(s.tokens) }

// IsPAN is isPAN.
var IsPAN = isPAN

// MatchesAll reports whether s matches every message (the zero Selector,
// "/" and "/*").
func (s Selector) MatchesAll() bool { return len(s.terms) == 0 }

// GroupLoaded reports whether the engine holds the consumer group (or the
// pull cursor, "cursor:" and a principal) of subject in memory.
func (e *Engine) GroupLoaded(subject, group string) bool {
	e.groups.mu.Lock()
	defer e.groups.mu.Unlock()
	return e.groups.m[store.GroupKey{Subject: subject, Group: group}] != nil
}

// HoldGroup holds the consumer group of subject, as a subscriber does,
// within Options.MaxGroupsPerSubject; release ends the hold.
func (e *Engine) HoldGroup(ctx context.Context, subject, group string) (release func(), err error) {
	g, err := e.groupWithin(ctx, store.GroupKey{Subject: subject, Group: group}, e.opts.MaxGroupsPerSubject)
	if err != nil {
		return nil, err
	}
	return func() { e.releaseGroup(g) }, nil
}

// EnforceRetention runs one retention pass, as the janitor does every
// Options.SweepInterval.
func (e *Engine) EnforceRetention(ctx context.Context) { e.enforceRetention(ctx) }

// RecordsHeld is how many records (refusals, redeliveries) the
// subscription whose handler ctx is holds for its loop to record; -1
// outside a handler.
func RecordsHeld(ctx context.Context) int {
	s, _ := ctx.Value(handlerOf{}).(*subscription)
	if s == nil {
		return -1
	}
	s.resMu.Lock()
	defer s.resMu.Unlock()
	return len(s.held)
}

// NextAuditWalkCallers is how many VerifyAudit calls wait on the walk that
// starts after the running one (0 when none waits).
func NextAuditWalkCallers(e *Engine) int {
	w := &e.verifies
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next == nil {
		return 0
	}
	return w.next.callers
}

// GrantPublicKey is the public half of the key the engine signs grant
// tokens with.
func (e *Engine) GrantPublicKey() []byte {
	return slices.Clone(e.grantKey.Public().(ed25519.PublicKey))
}

// RecentExact reports what the fan-out's cache holds of the message of
// subject at seq: whether its numbers are exact (decoded.exact), and
// whether the cache holds it at all.
func (e *Engine) RecentExact(subject string, seq uint64) (exact, cached bool) {
	d := e.recentAt(subject, seq)
	if d == nil {
		return false, false
	}
	d.value()
	return d.exact, true
}

// SetAfterAppend makes h run once the store has each message published
// and before the engine answers for it (nil: no more).
func (e *Engine) SetAfterAppend(h func(store.Message)) {
	if h == nil {
		e.afterAppend.Store(nil)
		return
	}
	e.afterAppend.Store(&h)
}
