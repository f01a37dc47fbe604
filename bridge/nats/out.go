package natsbridge

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
)

// outRoute carries a Pigeon subject to NATS. Each delivery is published
// as the message's envelope JSON and acknowledged only once NATS took it;
// a failure returns an error, so the broker redelivers it.
//
// On a pubsub subject a new session's subscription starts where the last
// one left off: at the lowest sequence handed over and not yet taken by
// NATS (at-least-once; JetStream drops the repeats by Nats-Msg-Id), or,
// when nothing was handed over yet, where the first one started. The
// first session of a JetStream route starts after the last message the
// stream holds from it (position.go). A work-queue subject needs no such
// care: the group keeps the position.
type outRoute struct {
	b *Bridge
	r *Route
	c counters

	mu       sync.Mutex
	inFlight map[uint64]struct{} // sequences handed over and not yet taken by NATS
	last     uint64              // the highest sequence handed over
	from     uint64              // where the broker started the subscription, while nothing was handed over

	stream    jetstream.Stream // the stream the route's messages must be in, as streamGen found it (target)
	streamGen *generation
}

func (o *outRoute) route() *Route       { return o.r }
func (o *outRoute) counters() *counters { return &o.c }

func (o *outRoute) start(g *generation) error {
	opts := []pigeon.SubscribeOption{pigeon.WithGroup(o.r.Group)}
	if o.r.Selector != "" {
		opts = append(opts, pigeon.WithSelector(o.r.Selector))
	}
	if o.r.Filter != "" {
		opts = append(opts, pigeon.WithFilter(o.r.Filter))
	}
	if o.r.MaxInFlight > 0 {
		opts = append(opts, pigeon.WithMaxInFlight(o.r.MaxInFlight))
	}
	var after, from uint64 // the stream's position, for a route without one of its own
	if seq := o.resumeAt(); seq > 0 {
		opts = append(opts, pigeon.WithStart(pigeon.StartAt(seq)))
	} else if o.tracksPosition() {
		var err error
		if after, from, err = o.streamPosition(g); err != nil {
			return fmt.Errorf("reading the route's position in JetStream: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(g.ctx, o.b.opts.PublishTimeout)
	defer cancel()
	sub, err := o.subscribe(ctx, g, after, from, opts)
	if err != nil {
		return err
	}
	if p, ok := sub.(interface{ From() uint64 }); ok {
		o.mu.Lock()
		if o.last == 0 {
			o.from = p.From()
		}
		o.mu.Unlock()
	}
	g.onStop(func(ctx context.Context) {
		if err := sub.Unsubscribe(ctx); err != nil {
			o.b.log.Debug("natsbridge: unsubscribing", "route", o.r.Name, "err", err)
		}
	})
	g.goTracked(func() {
		select {
		case <-g.ctx.Done():
		case <-sub.Done():
			if g.ctx.Err() != nil {
				return
			}
			// The broker ended the subscription: a revoked or expired
			// contract, a lost session, a shutdown.
			err := sub.Err()
			if err == nil {
				err = pigeon.NewError(pigeon.CodeSessionClosed, "the subscription ended")
			}
			err = routeError(o.r, err)
			if judge(err) == fatal {
				o.c.stop(err)
			}
			g.fail(err)
		}
	})
	return nil
}

// subscribe subscribes the route with opts. With a stream position
// (after > 0) it subscribes at the subject's end first, holding the
// deliveries back, to learn where the end is (keepOrResume); when the
// position is behind it, that subscription gives back what it was handed
// (pigeon.ErrUndelivered), ends, and one that starts after the position
// replaces it.
func (o *outRoute) subscribe(ctx context.Context, g *generation, after, from uint64, opts []pigeon.SubscribeOption) (pigeon.Subscription, error) {
	handle := func(ctx context.Context, d *pigeon.Delivery) error { return o.handle(ctx, g, d) }
	if after == 0 {
		return g.sess.Subscribe(ctx, o.r.Subject, handle, opts...)
	}
	decided := make(chan struct{})
	var replaced atomic.Bool
	sub, err := g.sess.Subscribe(ctx, o.r.Subject, func(ctx context.Context, d *pigeon.Delivery) error {
		select {
		case <-decided:
		case <-ctx.Done():
			return ctx.Err()
		}
		if replaced.Load() {
			return pigeon.ErrUndelivered
		}
		return handle(ctx, d)
	}, opts...)
	if err != nil {
		return nil, err
	}
	start := o.keepOrResume(sub, after, from)
	replaced.Store(start != nil)
	close(decided)
	if start == nil {
		return sub, nil
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		return nil, err
	}
	return g.sess.Subscribe(ctx, o.r.Subject, handle, append(opts, pigeon.WithStart(*start))...)
}

// resumeAt is where a new subscription starts: the lowest sequence in
// flight, or the one after the highest handed over; with nothing handed
// over yet, where the broker started the first subscription (its From),
// so that what was published while the session was down is carried; 0
// (where the broker starts one, after the last message stored) for the
// first.
func (o *outRoute) resumeAt() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == 0 {
		return o.from
	}
	low := o.last + 1
	for seq := range o.inFlight {
		low = min(low, seq)
	}
	return low
}

// handle publishes one delivery to NATS.
func (o *outRoute) handle(ctx context.Context, g *generation, d *pigeon.Delivery) error {
	seq := d.Message.Sequence
	o.mu.Lock()
	if o.inFlight == nil {
		o.inFlight = map[uint64]struct{}{}
	}
	o.inFlight[seq] = struct{}{}
	o.last = max(o.last, seq)
	resume := seq + 1 // where a bridge that starts resumes, once NATS took this one
	if o.tracksPosition() {
		for s := range o.inFlight { // the deliveries that failed and wait to be tried again
			if s != seq {
				resume = min(resume, s)
			}
		}
	}
	o.mu.Unlock()
	if o.b.beforeOut != nil {
		o.b.beforeOut(ctx, o.r.Name, d.Message.ID)
	}
	err := o.publish(ctx, g, d, resume)
	if err != nil {
		o.c.retried.Add(1)
		o.b.log.Warn("natsbridge: NATS did not take a message; the broker redelivers it", "route", o.r.Name,
			"id", d.Message.ID, "attempt", d.Attempt, "err", err)
		if g.nc.IsClosed() {
			g.fail(ErrNATSClosed)
		}
		if tooLarge(err) {
			// NATS never takes it: a new session does not resume at it
			// (once the broker gives it up it would hold the route's
			// position there for good, and each new session would
			// publish again everything carried since). The broker still
			// tries it again within the subject's retry policy.
			o.mu.Lock()
			delete(o.inFlight, seq)
			o.mu.Unlock()
		}
		return err
	}
	o.mu.Lock()
	delete(o.inFlight, seq)
	o.mu.Unlock()
	o.c.forwarded.Add(1)
	return nil
}

// publish sends d's envelope to NATS and returns once NATS took it: after
// a flush on core NATS, after the PubAck on JetStream.
func (o *outRoute) publish(ctx context.Context, g *generation, d *pigeon.Delivery, resume uint64) error {
	m := d.Message
	msg := &nats.Msg{Subject: o.r.NATSSubject, Header: nats.Header{}, Data: d.AppendMessageJSON(nil)}
	msg.Header.Set(HeaderMsgID, natsMsgID(m.ID))
	msg.Header.Set(HeaderSubject, d.Subject)
	msg.Header.Set(HeaderSequence, strconv.FormatUint(m.Sequence, 10))
	msg.Header.Set(HeaderBridge, o.r.Name)
	if o.tracksPosition() {
		msg.Header.Set(HeaderResume, strconv.FormatUint(resume, 10))
	}

	ctx, cancel := context.WithTimeout(ctx, o.b.opts.PublishTimeout)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	if err := live(ctx, g); err != nil {
		return err
	}
	if o.r.JetStream {
		return o.publishJetStream(ctx, g, msg)
	}
	var mark uint64
	if g.viol != nil {
		mark = g.viol.mark() // before the last error is read: see check
	}
	before := g.nc.LastError()
	if err := g.nc.PublishMsg(msg); err != nil {
		return err
	}
	if o.b.betweenCore != nil {
		o.b.betweenCore(o.r.Name)
	}
	if err := g.nc.FlushWithContext(ctx); err != nil {
		return err
	}
	if err := publishDenied(g.nc, before, msg.Subject); err != nil || g.viol == nil {
		return err
	}
	// Another route's violation reported after ours overwrites the last
	// error: the connection's error handler heard both.
	return g.viol.check(ctx, mark, before, msg.Subject)
}

// publishDenied returns the error of a core NATS publish on subject that
// the server refused for the connection's permissions, before nc's last
// error was before. The server does not refuse such a publish; it drops
// it and reports the violation asynchronously, ahead of the flush's answer
// (the connection's error handler hears of it too), so a flush that
// succeeded does not mean the server took the message.
func publishDenied(nc *nats.Conn, before error, subject string) error {
	err := nc.LastError()
	if err == nil || err == before || !errors.Is(err, nats.ErrPermissionViolation) ||
		!strings.Contains(strings.ToLower(err.Error()), strings.ToLower(`publish to "`+subject+`"`)) {
		return nil
	}
	return fmt.Errorf("the NATS server refused the publish: %w", err)
}

// live returns nil when a delivery whose context is ctx may be published
// now: NATS is connected (waiting for it within ctx) and the delivery has
// not ended. The broker ends a delivery when the contract is revoked or
// expires, or the session is lost, and the generation ends when any route
// found its contract revoked. What leaves Pigeon is what the contract
// allows at that moment, so a delivery that ended is not published
// (JetStream's publish checks ctx too; core NATS's does not).
func live(ctx context.Context, g *generation) error {
	if err := connected(ctx, g.nc); err != nil {
		return err
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("the delivery ended before it was published: %w", err)
	}
	select {
	case <-g.failed:
		return fmt.Errorf("the session ended before the delivery was published: %w", g.err)
	default:
	}
	return nil
}

// publishJetStream publishes msg and returns once the stream stored it.
//
// The PubAck is read back before it is believed: the stream sends it to
// the publish's reply inbox, which every client that may subscribe to the
// route's NATS subject sees with the message, and the first answer there
// wins; a client that may publish to the inbox (NATS's allow_responses, or
// publish on _INBOX.>) could answer first that the message was stored
// when the stream never took it (no stream takes the subject, the stream
// refused it). So the route takes the message as stored only when the
// stream it must be in (Route.Stream, or the one that takes natsSubject)
// holds it at the sequence the PubAck names: on its NATS subject, with
// the same envelope bytes (verify).
//
// The stream answers "duplicate" for any message it took under the same
// Nats-Msg-Id within its duplicate window, on any of its subjects, whoever
// published it: a NATS client that may publish on one of them could send
// a Pigeon message's id first and keep the message out of the stream,
// the broker told it was taken. So a duplicate counts only when the
// message the stream holds under the id is this one; otherwise msg is
// published again without its Nats-Msg-Id, and stored.
func (o *outRoute) publishJetStream(ctx context.Context, g *generation, msg *nats.Msg) error {
	var opts []jetstream.PublishOpt
	if o.r.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(o.r.Stream))
	}
	for again := false; ; again = true {
		ack, err := g.js.PublishMsg(ctx, msg, opts...)
		if err != nil {
			return err
		}
		held, err := o.verify(ctx, g, ack, msg)
		if err != nil {
			return fmt.Errorf("reading back the message the PubAck names: %w", err)
		}
		switch {
		case held && ack.Duplicate:
			o.c.duplicates.Add(1)
			return nil
		case held:
			return nil
		case ack.Duplicate && !again:
			o.b.log.Warn("natsbridge: the stream holds another message under this one's Nats-Msg-Id: publishing it without one",
				"route", o.r.Name, "stream", ack.Stream, "streamSequence", ack.Sequence)
			msg.Header.Del(HeaderMsgID)
			if err := live(ctx, g); err != nil {
				return err
			}
			continue
		}
		o.b.log.Warn("natsbridge: a PubAck names a message the stream does not hold: not taken as stored (another NATS client answered the publish?)",
			"route", o.r.Name, "stream", ack.Stream, "streamSequence", ack.Sequence)
		return fmt.Errorf("%w: stream %q, sequence %d", errUnverifiedAck, ack.Stream, ack.Sequence)
	}
}

// errUnverifiedAck is the error of a publish whose PubAck the stream does
// not bear out.
var errUnverifiedAck = errors.New("natsbridge: the stream does not hold the message its PubAck names")

// verify reports whether ack, an answer to msg, is borne out by the
// stream the route publishes to: it is the one ack names, and it holds
// msg (its NATS subject, the same envelope bytes) at ack's sequence. A
// message the stream no longer holds is not msg, but for a stream that
// removes what its consumers took (work-queue or interest retention) and
// a PubAck that is not a duplicate: a consumer may have taken msg before
// it was read back, so a sequence the stream gave out already counts.
func (o *outRoute) verify(ctx context.Context, g *generation, ack *jetstream.PubAck, msg *nats.Msg) (bool, error) {
	st, err := o.target(ctx, g)
	if err != nil {
		return false, err
	}
	if ack.Stream != st.CachedInfo().Config.Name {
		o.forget(g) // another stream may take the subject now
		return false, nil
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	switch {
	case err == nil:
		// A stream that transforms subjects stores msg under another: the
		// route's name tells its messages from another route's copy of
		// the same envelope on another subject of the stream.
		subject := m.Subject == msg.Subject ||
			st.CachedInfo().Config.SubjectTransform != nil && m.Header.Get(HeaderBridge) == msg.Header.Get(HeaderBridge)
		return subject && bytes.Equal(m.Data, msg.Data), nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		o.forget(g) // the stream may have been replaced, its settings changed
		return false, err
	case ack.Duplicate || st.CachedInfo().Config.Retention == jetstream.LimitsPolicy:
		return false, nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		return false, err
	}
	return ack.Sequence <= info.State.LastSeq, nil
}

// target returns the stream the route's messages must be stored in:
// Route.Stream, or the stream that takes its NATS subject; looked up once
// a generation (and again after a read-back failed).
func (o *outRoute) target(ctx context.Context, g *generation) (jetstream.Stream, error) {
	o.mu.Lock()
	st, gen := o.stream, o.streamGen
	o.mu.Unlock()
	if st != nil && gen == g {
		return st, nil
	}
	name := o.r.Stream
	if name == "" {
		var err error
		if name, err = g.js.StreamNameBySubject(ctx, o.r.NATSSubject); err != nil {
			return nil, err
		}
	}
	st, err := g.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.stream, o.streamGen = st, g
	o.mu.Unlock()
	return st, nil
}

// forget drops the stream target found on g.
func (o *outRoute) forget(g *generation) {
	o.mu.Lock()
	if o.streamGen == g {
		o.stream, o.streamGen = nil, nil
	}
	o.mu.Unlock()
}

// natsMsgIDEncoded prefixes the Nats-Msg-Id of a Pigeon id that a header
// would not carry as it is.
const natsMsgIDEncoded = "b64:"

// natsMsgID is the Nats-Msg-Id of the Pigeon message id: the id itself,
// unless a header would not keep it exactly (nats.go trims white space at
// either end of a header value and turns CR and LF into spaces), or it
// begins with natsMsgIDEncoded; then natsMsgIDEncoded and the id in
// base64url. The broker's ids "order-42" and "order-42 " are two
// messages, and the stream would drop the second as a duplicate of the
// first: a publisher on the subject could keep another's message out of
// the stream by publishing its id with a space added first.
func natsMsgID(id string) string {
	plain := utf8.ValidString(id) && !strings.HasPrefix(id, natsMsgIDEncoded) &&
		!strings.ContainsFunc(id, func(c rune) bool { return c < 0x20 || c == 0x7f }) &&
		strings.TrimSpace(id) == id
	if plain {
		return id
	}
	return natsMsgIDEncoded + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// tooLarge reports whether err says that NATS refuses the message for its
// size, which does not change on retry: beyond the server's max_payload,
// or the stream's max_msg_size.
func tooLarge(err error) bool {
	var ae *jetstream.APIError
	return errors.Is(err, nats.ErrMaxPayload) ||
		errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum
}

// tracksPosition reports whether the route's JetStream stream records
// where a bridge that starts resumes it (position.go).
func (o *outRoute) tracksPosition() bool { return o.r.JetStream && o.r.MaxInFlight <= 1 }

// connected waits until nc is connected, or ctx ends: a message published
// while it reconnects would wait in its buffer, and might be sent after
// the broker was told it failed.
func connected(ctx context.Context, nc *nats.Conn) error {
	for {
		switch nc.Status() {
		case nats.CONNECTED:
			return nil
		case nats.CLOSED:
			return ErrNATSClosed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
