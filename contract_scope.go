package pigeon

import (
	"strings"
	"sync/atomic"
)

// permit is what a contract allows on one subject: the operations, those
// of them held through role permissions, and their scopes. (A grant, in
// grant.go, is a token that authenticates an account.)
type permit struct {
	ops     uint8
	viaRole uint8
	digest  string
	subj    atomic.Pointer[subject]
	scope   [4][]Selector // per operation (opIndex); nil: not scoped
}

// opIndex is op's slot in a grant's per-operation arrays: its position in
// the operation table (policy.Operations). An unknown operation gets the
// last slot.
func opIndex(op Operation) int {
	if i := op.Index(); i >= 0 {
		return i
	}
	return len(Operations) - 1
}

func (g *permit) setScope(op Operation, sel Selector) {
	i := opIndex(op)
	g.scope[i] = append(g.scope[i], sel)
}

// restrict scopes op, to no route until setScope adds one.
func (g *permit) restrict(op Operation) {
	if i := opIndex(op); g.scope[i] == nil {
		g.scope[i] = []Selector{}
	}
}

// scoped reports whether op is restricted to routes.
func (g *permit) scoped(op Operation) bool { return g != nil && g.scope[opIndex(op)] != nil }

// noRoute is the scopeKey of a scope that matches nothing; selectors start
// with '/', so no scope of routes has it.
const noRoute = "!"

// scopeKey names op's scope, for keying consumer groups.
func (g *permit) scopeKey(op Operation) string {
	if !g.scoped(op) {
		return ""
	}
	if len(g.scope[opIndex(op)]) == 0 {
		return noRoute
	}
	var b strings.Builder
	for i, s := range g.scope[opIndex(op)] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.String())
	}
	return b.String()
}

// inScope reports whether data is within the permit's scope for op.
func (g *permit) inScope(op Operation, data any) bool {
	if g == nil {
		return true
	}
	sels := g.scope[opIndex(op)]
	if sels == nil {
		return true
	}
	for _, s := range sels {
		if s.matchScope(data) {
			return true
		}
	}
	return false
}

// opBit is op's bit in a grant's operation set: 1 << its position in the
// operation table; 0 for an unknown operation.
func opBit(op Operation) uint8 {
	if i := op.Index(); i >= 0 {
		return 1 << i
	}
	return 0
}
