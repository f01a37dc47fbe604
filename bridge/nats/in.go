package natsbridge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
)

// inRoute carries NATS to a Pigeon subject: each NATS message becomes one
// message published through the bridge's session, under its contract and
// past every gate.
type inRoute struct {
	b *Bridge
	r *Route
	c counters
}

func (in *inRoute) route() *Route       { return in.r }
func (in *inRoute) counters() *counters { return &in.c }

func (in *inRoute) start(g *generation) error {
	if in.r.JetStream {
		return in.startJetStream(g)
	}
	return in.startCore(g)
}

// outcome is what became of one publish.
type outcome int

const (
	accepted outcome = iota
	duplicate
	failed // err says how: see judge
)

// publish publishes m through g's session at depth hops (see depth).
// redelivered says that m may have been published before (a JetStream
// redelivery, a core NATS message whose publisher named its id): the
// broker's MESSAGE_ID_TAKEN then means it holds m already.
func (in *inRoute) publish(g *generation, m *pigeon.Message, hops uint32, redelivered bool) (outcome, error) {
	ctx, cancel := context.WithTimeout(g.ctx, in.b.opts.PublishTimeout)
	defer cancel()
	var res *pigeon.Result
	var err error
	if g.deep != nil {
		res, err = g.deep(ctx, m, hops)
	} else {
		res, err = g.sess.Publish(ctx, m)
	}
	switch {
	case err == nil && res.Status == pigeon.StatusDuplicate:
		in.c.duplicates.Add(1)
		return duplicate, nil
	case err == nil:
		in.c.forwarded.Add(1)
		return accepted, nil
	case redelivered && pigeon.ErrorCode(err) == pigeon.CodeMessageIDTaken:
		in.c.duplicates.Add(1)
		return duplicate, nil
	}
	return failed, err
}

// refuse counts and logs a message refused by a gate.
func (in *inRoute) refuse(id string, err error) {
	code := pigeon.ErrorCode(err)
	in.c.refuse(code)
	in.b.log.Warn("natsbridge: a message was refused", "route", in.r.Name, "id", id, "code", code, "err", err)
}

// looped reports whether an Out route of this bridge published the
// message: carrying it back would loop.
func (in *inRoute) looped(h nats.Header) bool {
	if name := h.Get(HeaderBridge); name != "" && in.b.outs[name] {
		in.c.skipped.Add(1)
		return true
	}
	return false
}

// natsOwn reports whether subject, which the route's NATS subject
// matched by a wildcard, is NATS's own traffic rather than a publisher's:
// a reply inbox (_INBOX.…, or the connection's own prefix) or a system
// subject ($JS.…, $SYS.…). A route of ">" would otherwise take the
// bridge's own: the stream's PubAck of each message an Out route
// publishes, which it would carry into Pigeon and the Out route out again,
// endlessly, and the JetStream API requests of every route. A route whose
// subject names such a prefix itself takes it.
func (in *inRoute) natsOwn(nc *nats.Conn, subject string) bool {
	pattern := in.r.NATSSubject
	if subject != "" && subject[0] == '$' && pattern[0] != '$' {
		in.c.skipped.Add(1)
		return true
	}
	for _, prefix := range [...]string{nats.InboxPrefix, nc.Opts.InboxPrefix + "."} {
		if prefix != "." && strings.HasPrefix(subject, prefix) && !strings.HasPrefix(pattern, prefix) {
			in.c.skipped.Add(1)
			return true
		}
	}
	return false
}

// startCore subscribes to core NATS. Core NATS does not redeliver: a
// message the broker refuses for a reason that may pass is retried a few
// times, then dropped and counted; messages sent while the bridge has no
// session are not received at all.
//
// What waits to be published is bounded in messages and in bytes
// (corePendingMsgs, corePendingBytes): beyond either, NATS drops what
// comes (a slow consumer), counted Dropped. A bound in messages alone
// would let publishers of large messages fill the bridge's memory while
// the broker is slow to answer (max_payload times the bound: a GiB at
// NATS's default 1 MiB).
func (in *inRoute) startCore(g *generation) error {
	sub, err := g.nc.SubscribeSync(in.r.NATSSubject)
	if err != nil {
		return err
	}
	g.onStop(func(context.Context) { _ = sub.Unsubscribe() })
	if err := sub.SetPendingLimits(corePendingMsgs, corePendingBytes); err != nil {
		return err
	}
	if err := g.nc.FlushTimeout(in.b.opts.PublishTimeout); err != nil {
		return err // the subscription is live once the server has it
	}
	g.goTracked(func() {
		dropped := 0
		for {
			m, err := sub.NextMsgWithContext(g.ctx)
			if n, derr := sub.Dropped(); derr == nil && n > dropped {
				in.c.dropped.Add(uint64(n - dropped))
				in.b.log.Warn("natsbridge: core NATS messages were dropped: the route does not keep up", "route", in.r.Name, "dropped", n-dropped)
				dropped = n
			}
			switch {
			case err == nil:
				in.handleCore(g, m)
			case g.ctx.Err() != nil:
				return
			case errors.Is(err, nats.ErrSlowConsumer):
				// reported with the next message (Dropped above)
			default:
				in.b.log.Warn("natsbridge: receiving from core NATS", "route", in.r.Name, "err", err)
				return // the subscription is closed: the session ends with the connection
			}
		}
	})
	return nil
}

// corePendingMsgs and corePendingBytes bound what a core NATS In route
// holds that waits to be published; variables for tests.
//
// The bound in bytes counts what NATS sent (headers and payload), but
// nats.go decodes a message's headers as it arrives, before any bound
// applies, into a map that takes up to about 16 times the bytes of a
// header block of many small headers (headerAmplification): 64 MiB
// waiting could hold about 1 GiB. The bound keeps what waits within
// coreMemoryBudget, at 4 MiB, which still holds four messages of NATS's
// default max_payload. A NATS message larger than the bound is dropped as
// a slow consumer would be.
var (
	corePendingMsgs  = 1024
	corePendingBytes = coreMemoryBudget / headerAmplification
)

// coreMemoryBudget is the memory the messages waiting on a core NATS In
// route may take, decoded.
const coreMemoryBudget = 64 << 20

// headerAmplification is about the most memory nats.go takes for a
// received message per byte NATS sent: a header block of many distinct
// small headers ("k: x") decoded, with the message's own copy.
const headerAmplification = 16

// coreAttempts bounds the publishes of one core NATS message.
const coreAttempts = 3

func (in *inRoute) handleCore(g *generation, nm *nats.Msg) {
	if in.b.beforeCore != nil {
		in.b.beforeCore(in.r.Name)
	}
	if in.looped(nm.Header) || in.natsOwn(g.nc, nm.Subject) {
		return
	}
	hid := nm.Header.Get(HeaderMsgID)
	redelivered := hid != "" // the publisher named it: a repeat is its retry
	m, carried, err := convert(in.r, nm.Data, "")
	var hops uint32
	if err == nil {
		hops, err = in.depth(carried)
	}
	if err == nil && !utf8.ValidString(hid) {
		// The WebSocket session would send U+FFFD in its place: ids
		// that differ would be taken for one.
		err = pigeon.NewError(pigeon.CodeInvalidUTF8, "the %s header is not UTF-8", HeaderMsgID)
	}
	if err != nil {
		in.refuse(coreID(in.r, strings.ToValidUTF8(hid, "\ufffd")), err)
		return
	}
	switch {
	case hid != "":
		m.ID = coreID(in.r, hid)
	case m.ID != "":
		m.ID = coreID(in.r, m.ID) // the envelope's id
	default:
		m.ID = newID() // so that a retry below is recognised
	}
	if err := in.fits(m); err != nil {
		in.refuse(m.ID, err)
		return
	}
	for attempt := 1; ; attempt++ {
		out, err := in.publish(g, m, hops, redelivered)
		if out != failed {
			return
		}
		v := judge(err)
		switch {
		case v == refused:
			in.refuse(m.ID, err)
			return
		case v == retry && attempt < coreAttempts && g.ctx.Err() == nil:
			in.c.retried.Add(1)
			redelivered = true
			select {
			case <-time.After(backoff(attempt, time.Second)):
			case <-g.ctx.Done():
			}
			continue
		case v != retry:
			g.fail(routeError(in.r, err))
		}
		in.c.dropped.Add(1)
		in.b.log.Warn("natsbridge: a core NATS message was dropped", "route", in.r.Name, "id", m.ID, "code", pigeon.ErrorCode(err), "err", err)
		return
	}
}

// fits refuses m, PAYLOAD_TOO_LARGE, when its encoding (what the session
// sends) is larger than MaxMessageBytes: the broker's WebSocket server
// would not answer it but cut the connection. The encoding is measured
// only when a bound on it (every text field escaped at six bytes a byte)
// does not fit.
func (in *inRoute) fits(m *pigeon.Message) error {
	limit := in.b.opts.MaxMessageBytes
	n := len(m.Data) + 512 // the members' names and punctuation
	for _, f := range [...]string{m.SpecVersion, m.ID, m.Type, m.Source, m.Subject, m.Time, m.Intent, m.IdempotencyKey,
		m.Classification, m.Region, m.ReplyTo, m.CorrelationID, m.Reason} {
		n += 6 * len(f)
	}
	if sig := m.Signature; sig != nil {
		n += 6 * (len(sig.KID) + len(sig.Alg) + len(sig.Sig))
	}
	if n <= limit || len(m.AppendJSON(nil)) <= limit {
		return nil
	}
	return pigeon.NewError(pigeon.CodePayloadTooLarge, "the message is larger than %d bytes encoded", limit)
}

// newID returns a fresh message id for a core NATS message without one.
func newID() string { return "nats-" + rand.Text() }

// coreID is the Pigeon id of a core NATS message whose publisher named id
// (its Nats-Msg-Id, or its envelope's id): "nats:<route>:<id>". Message
// ids are one namespace across the broker, and MESSAGE_ID_TAKEN on an id
// a publisher named counts as a duplicate; were the publisher's id used as
// it is, a NATS publisher would choose the Pigeon id verbatim, and could
// take ahead of time the id of a message of another route or subject (a
// JetStream route's "nats-<stream>/<durable>-<created>-<sequence>", another core route's
// publishers' ids, a Pigeon publisher's), which would then be refused, or
// dropped as a duplicate. Scoped by the route's name (which holds no ':'),
// the ids of one route's publishers cannot meet those of another route,
// of a JetStream route ("nats-…") or of the broker ("msg_…"). An id too
// long to fit in an envelope field is replaced by its SHA-256.
func coreID(r *Route, id string) string {
	if id == "" {
		return ""
	}
	prefix := "nats:" + r.Name + ":"
	if len(prefix)+len(id) > pigeon.MaxEnvelopeField {
		sum := sha256.Sum256([]byte(id))
		id = "sha256:" + hex.EncodeToString(sum[:])
	}
	return prefix + id
}

// jetStreamID is the Pigeon id of the message at seq in stream, created
// at created, as the durable consumer durable hands it over:
// "nats-<stream>/<durable>-<created>-<seq>", created in Unix nanoseconds in
// base 36 (stream and consumer names hold no '/', so the parts are
// unambiguous). A stream deleted and created again under its name numbers
// its messages from 1 again: without its creation in them, their ids were
// those of the first stream's messages, and each was taken for a
// redelivery of one the broker held and dropped. Without the durable, two
// bridges consuming one stream through consumers of their own (into two
// subjects, say) published each message under one id, and the broker
// refused the second MESSAGE_ID_TAKEN: one of them lost every message;
// bridges that share a durable (one route run twice for availability)
// still give one id, so a message both hand over is published once. When
// the id is too long for an envelope's (JetStream takes names of up to 255
// bytes), "sha256:" and the SHA-256 of "<stream>/<durable>" in hex stand in
// their place: the broker refused such ids, ENVELOPE_INVALID, and every
// message of the route was terminated.
func jetStreamID(stream, durable string, created time.Time, seq uint64) string {
	c := strconv.FormatInt(created.UnixNano(), 36)
	n := strconv.FormatUint(seq, 10)
	name := stream + "/" + durable
	if len("nats---")+len(name)+len(c)+len(n) > pigeon.MaxEnvelopeField {
		sum := sha256.Sum256([]byte(name))
		name = "sha256:" + hex.EncodeToString(sum[:])
	}
	return "nats-" + name + "-" + c + "-" + n
}

// fetchBatch is how many JetStream messages one pull asks for, and
// fetchWait how long it waits for them.
const (
	fetchBatch = 32
	fetchWait  = time.Second
)

// fetchBytes bounds the bytes one pull asks for (messages with their
// subjects and headers), so that what the route holds is bounded in bytes
// as a core route's is (corePendingBytes), not fetchBatch times
// max_payload (2 GiB at NATS's largest). A message larger than the bound
// is pulled alone, by a pull of one message without it. A variable for
// tests.
//
// Headers decoded on arrival take up to headerAmplification times their
// size (see corePendingBytes), but a stream stores no header block of
// 64 KiB or more: a pull holds at most fetchBatch times 1 MiB of decoded
// headers besides fetchBytes of messages, about 40 MiB in all.
var fetchBytes = 8 << 20

// maxStoredHeaders is the largest header block a JetStream stream stores
// (its length is kept in 16 bits).
const maxStoredHeaders = 1<<16 - 1

// startJetStream binds the route's durable pull consumer (creating it
// when it does not exist) and consumes from it.
func (in *inRoute) startJetStream(g *generation) error {
	ctx, cancel := context.WithTimeout(g.ctx, in.b.opts.PublishTimeout)
	defer cancel()
	cons, created, err := in.consumer(ctx, g.js)
	if err != nil {
		return err
	}
	g.goTracked(func() {
		fails := 0
		large := false  // the next message is larger than fetchBytes
		rebind := false // a pull failed: the consumer may be gone
		for g.ctx.Err() == nil {
			if rebind {
				// A stream deleted takes its consumers with it; created
				// again, it has none: each pull of the old consumer failed
				// (no responders) for the rest of the session. Bind again,
				// as the session's start does, and wait while the stream
				// does not exist.
				c, cr, err := in.rebind(g)
				var refused *pigeon.Error
				if errors.As(err, &refused) && refused.Code == pigeon.CodeInvalidArgument && !errors.Is(err, jetstream.ErrStreamNotFound) {
					g.fail(routeError(in.r, err)) // replaced by a consumer the route cannot use
					return
				}
				if err != nil {
					fails++
					in.b.log.Warn("natsbridge: binding the JetStream consumer again", "route", in.r.Name, "err", err)
					select {
					case <-time.After(backoff(fails, maxPullBackoff)):
					case <-g.ctx.Done():
					}
					continue
				}
				cons, created, rebind = c, cr, false
			}
			// Each pull ends by itself, rather than with the generation:
			// messages the server sent for a pull that was cancelled
			// would wait for the consumer's ack wait before redelivery;
			// those of a pull that ends are all handed over, and the
			// ones left when the session goes are given back at once.
			var batch jetstream.MessageBatch
			var err error
			if large {
				batch, err = cons.Fetch(1, jetstream.FetchMaxWait(fetchWait))
			} else {
				batch, err = cons.Fetch(fetchBatch, jetstream.FetchMaxWait(fetchWait), jetstream.FetchMaxBytes(fetchBytes))
			}
			got := 0
			if err == nil {
				got = in.handleBatch(g, batch, created, cons.CachedInfo().Config.AckWait)
				err = batch.Error()
			}
			// A bounded pull that the server ends at once with nothing (it
			// refuses one whose next message exceeds the bound, an end the
			// client reports as an empty batch) is followed by one pull of
			// one message without the bound; so is one that waited and
			// found nothing, at no cost.
			if !large && got == 0 && (err == nil || errors.Is(err, jetstream.ErrMaxBytesExceeded)) {
				large = true
				continue
			}
			large = false
			if err == nil || g.ctx.Err() != nil || errors.Is(err, nats.ErrTimeout) {
				fails = 0
				continue
			}
			fails++
			rebind = true
			in.b.log.Debug("natsbridge: pulling from JetStream", "route", in.r.Name, "err", err)
			select {
			case <-time.After(backoff(fails, maxPullBackoff)):
			case <-g.ctx.Done():
			}
		}
	})
	return nil
}

// handleBatch publishes the messages of one pull, one at a time, as they
// come, and returns how many there were. While one is published, those
// that wait behind it are kept (InProgress) every third of the consumer's
// ack wait: a batch of fetchBatch messages at up to PublishTimeout each
// can take longer than the ack wait (30 s by default), and JetStream would
// hand the tail out again, to another bridge sharing the durable or to the
// route's next pull, while it is still in hand.
func (in *inRoute) handleBatch(g *generation, batch jetstream.MessageBatch, created time.Time, ackWait time.Duration) int {
	var (
		mu      sync.Mutex
		waiting = map[jetstream.Msg]bool{} // received, not yet handled
		queue   = make(chan jetstream.Msg, fetchBatch)
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	wg.Add(2)
	go func() { // takes every message as it comes, so that it is kept
		defer wg.Done()
		defer close(queue)
		for m := range batch.Messages() {
			mu.Lock()
			waiting[m] = true
			mu.Unlock()
			queue <- m
		}
	}()
	go func() {
		defer wg.Done()
		if ackWait <= 0 {
			ackWait = 30 * time.Second // the server's default
		}
		tick := time.NewTicker(max(ackWait/3, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			mu.Lock()
			for m := range waiting {
				ack(in, m.InProgress())
			}
			mu.Unlock()
		}
	}()
	got := 0
	for m := range queue {
		mu.Lock()
		delete(waiting, m) // in hand: settled below, and never kept after
		mu.Unlock()
		in.handleJetStream(g, m, created)
		got++
	}
	close(done)
	wg.Wait()
	return got
}

// rebind binds the route's consumer again after a failed pull, as
// consumer does: its error wraps jetstream.ErrStreamNotFound while the
// stream does not exist (for now), and is INVALID_ARGUMENT otherwise when
// the consumer that exists is one the route cannot use.
func (in *inRoute) rebind(g *generation) (jetstream.Consumer, time.Time, error) {
	ctx, cancel := context.WithTimeout(g.ctx, in.b.opts.PublishTimeout)
	defer cancel()
	return in.consumer(ctx, g.js)
}

// consumer returns the route's durable consumer, and when its stream was
// created (the ids of its messages name it). One that exists must
// filter on the route's NATS subject alone, ack explicitly and deliver
// payloads: otherwise messages of other subjects would be carried to the
// route's Pigeon subject, acknowledged before the broker accepted them, or
// published without their data.
func (in *inRoute) consumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, time.Time, error) {
	r := in.r
	st, err := js.Stream(ctx, r.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, time.Time{}, pigeon.WrapError(pigeon.CodeInvalidArgument, err, "the JetStream stream %q does not exist", r.Stream)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	cons, err := st.Consumer(ctx, r.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = st.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: r.Durable, FilterSubject: r.NATSSubject, AckPolicy: jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1,
			Description: "pigeon bridge route " + r.Name,
		})
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = st.Consumer(ctx, r.Durable)
		}
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	cfg := cons.CachedInfo().Config
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = append(filters, cfg.FilterSubject)
	}
	// A headers-only consumer delivers no payload: each message would be
	// published empty, and acknowledged.
	if len(filters) != 1 || filters[0] != r.NATSSubject || cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.HeadersOnly {
		return nil, time.Time{}, pigeon.NewError(pigeon.CodeInvalidArgument,
			"the consumer %q on stream %q must filter on %q alone, ack explicitly and deliver payloads (not headers only)", r.Durable, r.Stream, r.NATSSubject)
	}
	return cons, st.CachedInfo().Created, nil
}

// handleJetStream publishes one JetStream message and settles it: Ack once
// the broker accepted it (or held it already), Term when a gate refused
// it, NakWithDelay when the refusal may pass or the session failed.
func (in *inRoute) handleJetStream(g *generation, jm jetstream.Msg, created time.Time) {
	if in.b.beforeJetStream != nil {
		in.b.beforeJetStream(in.r.Name)
	}
	meta, err := jm.Metadata()
	if err != nil {
		in.b.log.Error("natsbridge: a JetStream message without metadata", "route", in.r.Name, "err", err)
		return
	}
	if in.looped(jm.Headers()) {
		ack(in, jm.Ack())
		return
	}
	if g.ctx.Err() != nil { // the session is going: leave it for the next one
		ack(in, jm.Nak())
		return
	}
	if !subjectMatches(in.r.NATSSubject, jm.Subject()) {
		// The consumer was replaced since the session checked it (deleted
		// and created again under its name) by one that filters on other
		// subjects: what it hands over is not published (it would reach
		// the route's Pigeon subject). The next session checks it again
		// (consumer).
		ack(in, jm.Nak())
		g.fail(routeError(in.r, fmt.Errorf("the consumer %q on stream %q changed: it delivered a message of %q", in.r.Durable, in.r.Stream, jm.Subject())))
		return
	}
	id := jetStreamID(meta.Stream, in.r.Durable, created, meta.Sequence.Stream)
	m, carried, err := convert(in.r, jm.Data(), id)
	var hops uint32
	if err == nil {
		hops, err = in.depth(carried)
	}
	if err == nil {
		err = in.fits(m)
	}
	if err != nil {
		in.refuse(id, err)
		ack(in, jm.TermWithReason(string(pigeon.ErrorCode(err))))
		return
	}
	out, err := in.publish(g, m, hops, meta.NumDelivered > 1)
	if out != failed {
		if in.b.skipAck != nil && in.b.skipAck(in.r.Name, id) {
			return
		}
		ack(in, jm.Ack())
		return
	}
	switch v := judge(err); v {
	case refused:
		in.refuse(id, err)
		ack(in, jm.TermWithReason(string(pigeon.ErrorCode(err))))
	default:
		in.c.retried.Add(1)
		delay := min(time.Duration(meta.NumDelivered)*time.Second, 30*time.Second)
		if v != retry {
			delay = minReconnectDelay // for the next session
			g.fail(routeError(in.r, err))
		}
		in.b.log.Warn("natsbridge: the broker did not take a message; NATS redelivers it", "route", in.r.Name,
			"id", id, "code", pigeon.ErrorCode(err), "err", err, "in", delay)
		ack(in, jm.NakWithDelay(delay))
	}
}

// ack logs a failed acknowledgement: JetStream then redelivers the message
// after the consumer's ack wait, and the broker recognises it by its id.
func ack(in *inRoute, err error) {
	if err != nil {
		in.b.log.Debug("natsbridge: acknowledging a JetStream message", "route", in.r.Name, "err", err)
	}
}
