package natsbridge

import (
	"context"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
)

// Where an Out route starts when it has no position of its own in memory
// (a bridge that just started): on core NATS nothing records how far an
// earlier bridge got, so the route starts where a new subscription does,
// at the subject's end. A JetStream stream does record it: the last
// message it holds on the route's NATS subject, when this route published
// it, names in its Pigeon-Sequence header the last Pigeon sequence the
// stream took, and the route starts right after it (or earlier: see
// Pigeon-Resume below).
//
// That message is trusted only when its Pigeon-Subject is the route's
// subject and its Pigeon-Bridge the route's name: a message of another
// publisher, another Pigeon subject or another route says nothing of this
// route's progress, and the route then starts at the subject's end. Nor is
// it used when the route has several deliveries in flight (MaxInFlight
// above 1): they finish out of order, so a message stored last does not
// mean that those before it were stored. With one in flight the route is
// handed one delivery at a time, but one that failed may wait for its
// retry while the next ones are handed over (over WebSocket it does): the
// stream's last message then follows one the stream does not hold. Its
// Pigeon-Resume header names the lowest sequence of such a delivery, and
// the route starts there (the stream drops what it holds already, within
// its duplicate window) rather than after the last message, which would
// skip it.

// streamPosition returns the Pigeon sequence that the last message on the
// route's NATS subject names, when that message is the route's own, and
// where the route resumes (its Pigeon-Resume, when it names a sequence up
// to the one after it; else the one after it); 0 when the stream records
// no position of the route (no stream takes the subject, it holds no
// message on it, the last one is someone else's). An error is returned
// when the stream could not be asked: starting at the subject's end then
// would skip what was published while no bridge ran.
func (o *outRoute) streamPosition(g *generation) (last, from uint64, err error) {
	ctx, cancel := context.WithTimeout(g.ctx, o.b.opts.PublishTimeout)
	defer cancel()
	if err := connected(ctx, g.nc); err != nil {
		return 0, 0, err
	}
	name := o.r.Stream
	if name == "" {
		if name, err = g.js.StreamNameBySubject(ctx, o.r.NATSSubject); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return 0, 0, nil // nothing was stored: the publishes fail until a stream takes the subject
			}
			return 0, 0, err
		}
	}
	// Stream reads the stream's configuration, so that the lookup below
	// uses the direct-get API when the stream allows it, and the stream's
	// own API otherwise.
	st, err := g.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, o.r.NATSSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	h := m.Header
	seq, err := strconv.ParseUint(h.Get(HeaderSequence), 10, 64)
	if h.Get(HeaderSubject) != o.r.Subject || h.Get(HeaderBridge) != o.r.Name || err != nil || seq == 0 {
		o.b.log.Info("natsbridge: the stream's last message is not this route's: starting at the subject's end",
			"route", o.r.Name, "stream", name, "streamSequence", m.Sequence)
		return 0, 0, nil
	}
	from = seq + 1
	if r, err := strconv.ParseUint(h.Get(HeaderResume), 10, 64); err == nil && r > 0 && r <= seq {
		from = r // a bridge before Pigeon-Resume did not set it
	}
	return seq, from, nil
}

// keepOrResume decides, for a route that found its position in the stream
// (after, the last sequence the stream took, and from, where it resumes),
// whether sub (subscribed at the subject's end, its deliveries
// held back meanwhile) is the subscription to keep: it returns nil when
// it is, or the Start of the one that replaces it.
//
// A position beyond the end means the broker numbers its messages anew
// (it lost its store, or it is another broker than the one the stream
// heard from): it is not used, and the route keeps the subscription at the
// end, as it did before the broker started a StartAt beyond the end at the
// subject's first message (pigeon.StartAt) instead of waiting there. A
// position before the end resumes at from; what the subject no
// longer retains by then is gone, and the subscription starts at the first
// message retained.
func (o *outRoute) keepOrResume(sub pigeon.Subscription, after, from uint64) *pigeon.Start {
	p, ok := sub.(interface{ From() uint64 })
	if !ok {
		o.b.log.Warn("natsbridge: the session does not say where a subscription starts: starting at the subject's end",
			"route", o.r.Name, "streamPosition", after)
		return nil
	}
	end := p.From()
	switch {
	case end == 0: // not a pubsub subject: the group keeps the position
		return nil
	case after >= end:
		o.b.log.Warn("natsbridge: the stream's position is beyond the subject's end (its messages are numbered anew): starting at the end",
			"route", o.r.Name, "streamPosition", after, "subjectEnd", end)
		return nil
	case from == end:
		return nil
	}
	o.b.log.Info("natsbridge: resuming after the stream's last message", "route", o.r.Name, "from", from, "streamPosition", after, "subjectEnd", end)
	s := pigeon.StartAt(from)
	return &s
}
