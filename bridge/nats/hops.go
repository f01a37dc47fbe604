package natsbridge

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"

	"pigeon"
)

// CodeHopsExceeded (pigeon.CodeHopsExceeded) refuses a message an In
// route would carry in deeper than Options.MaxHops: the envelope says it
// has been through MaxHops bridges and programs already, as it would in a
// loop. Like the bridge's other refusals it is counted
// (RouteStats.Refused), logged, and terminated on JetStream, never
// retried.
const CodeHopsExceeded = pigeon.CodeHopsExceeded

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

// warnNoDepth is logged once a session when the broker refuses the
// bridge's principal a depth.
const warnNoDepth = "natsbridge: the broker does not let this bridge's principal publish at a depth (it lacks the role in \"role\"): " +
	"its messages are published at 0, and a loop through it is not bounded by MaxHops"

// deepPublisher returns how the In routes publish on sess at a depth, or
// nil when the session cannot (it is not a pigeon.DepthPublisher). The
// in-process session publishes at the depth asked, as its embedder's
// Caller; over WebSocket the broker takes the depth only from a principal
// holding pigeon.RoleBridge. From any other it refuses the publish
// FORBIDDEN (which no publish is refused otherwise): the session then
// publishes at 0, as a client's, for the rest of its life, and the bridge
// logs once that a loop through it is unbounded until its principal is
// given the role. A bridge that stopped instead would stop every bridge
// deployed before the role existed; the next session tries again, so a
// role given meanwhile counts from the next reconnection.
func deepPublisher(sess pigeon.Session, log *slog.Logger) deepPublish {
	dp, ok := sess.(pigeon.DepthPublisher)
	if !ok {
		return nil
	}
	var shallow atomic.Bool
	return func(ctx context.Context, m *pigeon.Message, hops uint32) (*pigeon.Result, error) {
		if hops == 0 || shallow.Load() {
			return sess.Publish(ctx, m)
		}
		res, err := dp.PublishAt(ctx, m, hops)
		if pigeon.ErrorCode(err) != pigeon.CodeForbidden {
			return res, err
		}
		if shallow.CompareAndSwap(false, true) {
			log.Warn(warnNoDepth, "role", pigeon.RoleBridge, "err", err)
		}
		return sess.Publish(ctx, m)
	}
}
