package natsbridge

import (
	"context"
	"math"

	"pigeon"
	"pigeon/transport/inproc"
)

// CodeHopsExceeded refuses a message an In route would carry in deeper
// than Options.MaxHops: the envelope says it has been through MaxHops
// bridges and programs already, as it would in a loop. Like the bridge's
// other refusals it is counted (RouteStats.Refused), logged, and
// terminated on JetStream, never retried.
const CodeHopsExceeded pigeon.Code = "HOPS_EXCEEDED"

// depth is the Hops an In route publishes a message at whose envelope
// carried carried: one more, for this pass. It refuses, HOPS_EXCEEDED, a
// message that carried MaxHops or more, or 2^32-1, after which a Hops
// would wrap. With MaxHops negative the route carries no depth: every
// message is at 0, as a client's.
func (in *inRoute) depth(carried uint32) (uint32, error) {
	limit := in.b.opts.MaxHops
	if limit < 0 {
		return 0, nil
	}
	if int64(carried) >= int64(limit) || carried == math.MaxUint32 {
		return 0, pigeon.NewError(CodeHopsExceeded, "the message has been through %d bridges and programs: a route carries none through more than %d (Options.MaxHops)", carried, limit)
	}
	return carried + 1, nil
}

// deepPublish publishes a message at a depth (pigeon.Caller.Hops) other
// than 0.
type deepPublish func(ctx context.Context, m *pigeon.Message, hops uint32) (*pigeon.Result, error)

// deepPublisher returns how the In routes publish on sess at a depth, or
// nil when the session cannot: only an in-process session acts as a
// Caller of an engine the bridge can reach (its Dialer's), which
// publishes at the caller's Hops as package programs does. A session over
// WebSocket is a client's, whose messages the broker always writes at
// depth 0 (a client cannot choose a message's depth).
func deepPublisher(d pigeon.Dialer, sess pigeon.Session) deepPublish {
	var e *pigeon.Engine
	switch d := d.(type) {
	case inproc.Dialer:
		e = d.Engine
	case *inproc.Dialer:
		if d != nil {
			e = d.Engine
		}
	}
	s, ok := sess.(interface{ Caller() pigeon.Caller })
	if e == nil || !ok {
		return nil
	}
	// The session's own Publish is this call with Hops 0, after a check
	// that the session is open: the bridge closes it only once every
	// route's goroutine has ended (teardown), and the engine judges the
	// caller's contract at each publish (expired, revoked) as for the
	// session's.
	return func(ctx context.Context, m *pigeon.Message, hops uint32) (*pigeon.Result, error) {
		c := s.Caller()
		c.Hops = hops
		return e.Publish(ctx, c, m)
	}
}
