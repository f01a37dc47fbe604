package pigeon

import "slices"

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
