package pigeon

import (
	"context"
	"fmt"
)

// judge runs gates over a in order and returns the name and verdict of
// the first that does not allow it; ok when every gate allowed it.
//
// A gate that panics refuses the message, INTERNAL, instead of ending the
// process: a built-in gate runs code of other libraries on what a sender
// chose (the schema validator panicked on a number whose exponent math/big
// cannot hold), and an application's gate is code the broker does not
// know. Over WebSocket a publish runs on a worker goroutine, where a panic
// would end every connection the broker holds. The panic is logged with
// its stack, never returned: its value may quote the message, and noted
// (NotePanic, PanicGate).
func (e *Engine) judge(ctx context.Context, gates []Gate, a *Admission) (gate string, v Verdict, ok bool) {
	i := 0
	defer func() {
		if p := recover(); p != nil {
			gate = gates[i].Name()
			v, ok = Deny(CodeInternal, fmt.Sprintf("gate %s failed on this message", gate)), false
			e.panicked(PanicGate, "a gate panicked: the message is refused", panicText(p), "gate", gate, "subject", noPAN(a.Message.Subject))
		}
	}()
	if a.lazy && !ownChain(gates) {
		a.tree() // a gate of the application's reads Data
	}
	for ; i < len(gates); i++ {
		if v := gates[i].Check(ctx, a); !v.Allowed() {
			return gates[i].Name(), v, false
		}
	}
	return "", Verdict{}, true
}

// docReader marks the broker's own gates: they read the data through
// Admission.doc, or build Data through Admission.tree where they need
// it, and never read Data itself. Before any other gate, judge builds
// Data.
type docReader interface{ readsDoc() }

// ownChain reports whether every gate of chain is the broker's own
// (docReader). The application's gates follow the broker's (New), so
// the last gate tells.
func ownChain(chain []Gate) bool {
	if len(chain) == 0 {
		return true
	}
	_, ok := chain[len(chain)-1].(docReader)
	return ok
}

func (envelopeGate) readsDoc()       {}
func (contractGate) readsDoc()       {}
func (rateGate) readsDoc()           {}
func (ruleGate) readsDoc()           {}
func (intentGate) readsDoc()         {}
func (idempotencyGate) readsDoc()    {}
func (classificationGate) readsDoc() {}
func (regionGate) readsDoc()         {}
func (forbiddenGate) readsDoc()      {}
func (tokenizedGate) readsDoc()      {}
func (encryptionGate) readsDoc()     {}
func (schemaGate) readsDoc()         {}
func (qualityGate) readsDoc()        {}
func (signatureGate) readsDoc()      {}

// wantsTree reports whether Data is sure to be needed for a message of
// s, so that it is better decoded as a tree at once than in the flat
// form first: an application's gate reads it (appGates, known at New),
// or a condition on publish, a data-quality rule or the encryption gate
// does (subject.treeData, known when the subject is compiled). Either
// way every gate gets the same answer; this only saves work.
func (e *Engine) wantsTree(s *subject) bool {
	return e.appGates || (s != nil && s.treeData)
}
