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
	for ; i < len(gates); i++ {
		if v := gates[i].Check(ctx, a); !v.Allowed() {
			return gates[i].Name(), v, false
		}
	}
	return "", Verdict{}, true
}
