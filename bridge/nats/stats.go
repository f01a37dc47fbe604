package natsbridge

import (
	"maps"
	"sync"
	"sync/atomic"

	"pigeon"
)

// Stats is a snapshot of a bridge.
type Stats struct {
	// Connected reports whether a Pigeon session is up and every route
	// runs on it.
	Connected bool
	// Principal and ContractID name the identity the broker resolved from
	// the bridge's credential and the contract of the current session.
	Principal  string
	ContractID string
	// Sessions counts the sessions dialed; after the first, each is a
	// reconnection or a renewed contract.
	Sessions uint64
	// Err is the error that stopped the bridge (what Run returned), or nil.
	Err    error
	Routes []RouteStats
}

// RouteStats counts what one route did since New.
type RouteStats struct {
	Name      string
	Direction Direction
	// Running reports whether the route runs on the current session.
	Running bool
	// Forwarded counts messages carried: for Out, deliveries NATS took
	// (flushed, or acknowledged by the stream); for In, messages the broker
	// accepted.
	Forwarded uint64
	// Duplicates counts, for In, redelivered messages the broker already
	// held (answered "duplicate", or MESSAGE_ID_TAKEN for a redelivery)
	// and, for Out, publishes the stream recognised by their Nats-Msg-Id
	// as a message it holds already on the route's NATS subject (one it
	// holds under that id from another publisher or subject is no
	// duplicate: the route publishes the message again without the id).
	Duplicates uint64
	// Refused counts, for In, messages refused by a gate (or before the
	// broker, as a gate would), by code. They are terminated on
	// JetStream and never retried.
	Refused map[pigeon.Code]uint64
	// Retried counts transient failures that left a message for another
	// attempt: for Out a NATS publish that failed (the broker redelivers;
	// a PubAck the stream does not bear out, or a core publish the server
	// refused for the connection's permissions, is a failure),
	// for In a publish that failed for a reason that may pass (NakWithDelay
	// on JetStream, a few immediate retries on core NATS).
	Retried uint64
	// Skipped counts, for In, messages that one of this bridge's Out
	// routes published (loop prevention), and, on core NATS, NATS's own
	// traffic that a wildcard matched (reply inboxes, $ subjects).
	Skipped uint64
	// Dropped counts, for a core NATS In route, messages lost after the
	// retries failed: core NATS does not redeliver.
	Dropped uint64
	// Err is why the route stopped, when it stopped the bridge.
	Err error
}

// counters are one route's live counts.
type counters struct {
	forwarded, duplicates, retried, skipped, dropped atomic.Uint64
	running                                          atomic.Bool

	mu      sync.Mutex
	refused map[pigeon.Code]uint64
	err     error
}

func (c *counters) refuse(code pigeon.Code) {
	c.mu.Lock()
	if c.refused == nil {
		c.refused = map[pigeon.Code]uint64{}
	}
	c.refused[code]++
	c.mu.Unlock()
}

func (c *counters) stop(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

func (c *counters) snapshot(r *Route) RouteStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return RouteStats{
		Name: r.Name, Direction: r.Direction, Running: c.running.Load(),
		Forwarded: c.forwarded.Load(), Duplicates: c.duplicates.Load(), Refused: maps.Clone(c.refused),
		Retried: c.retried.Load(), Skipped: c.skipped.Load(), Dropped: c.dropped.Load(), Err: c.err,
	}
}
