package ws

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"pigeon"
	"pigeon/internal/jsontext"
)

// DefaultMaxPendingPublishes is how many asynchronous publishes a Session
// has in flight at most, unless WithMaxPendingPublishes says otherwise.
const DefaultMaxPendingPublishes = 1024

// maxBatchBytes bounds the encoded messages the client puts in one
// publish_batch frame, well under the server's default MaxFrame (and under
// the MaxFrame a server's contract answer names); a message larger than
// that goes in a frame of its own.
const maxBatchBytes = 256 << 10

// publishBatchLimit is how many messages the client puts in one frame:
// MaxPublishBatch, or 1 in a benchmark that measures one corked frame per
// message instead.
var publishBatchLimit = MaxPublishBatch

// WithMaxPendingPublishes bounds the publishes a Session has sent or
// queued and not yet had answered (default DefaultMaxPendingPublishes);
// PublishAsync and Publish wait for room beyond it. n < 1 means the
// default.
func WithMaxPendingPublishes(n int) Option {
	return func(o *dialOptions) { o.maxPending = n }
}

// PendingPublish is the answer to come of one PublishAsync. It is resolved
// exactly once: with the server's decision, with the typed *pigeon.Error
// that refused the message (as Publish returns it), or with a transport
// error (SESSION_CLOSED, SHUTTING_DOWN) when the connection ends before the
// answer came. It is safe for concurrent use.
type PendingPublish struct {
	resolved atomic.Bool // res and err are set
	mu       sync.Mutex  // guards done
	// done is closed once resolved; it is made only for a Done or Wait
	// that finds p unresolved, as most publishes are answered before
	// anyone waits for them.
	done  chan struct{}
	res   *pigeon.Result
	err   error
	slots chan struct{} // the session's in-flight bound, given back once resolved
	data  []byte        // the data sent, for a brief answer (see sentData)
}

// errNotAnswered is what Result says before Done is closed.
var errNotAnswered = pigeon.NewError(pigeon.CodeRequestTimeout, "the publish has no answer yet")

// closedDone is the Done of every publish resolved before anyone asked.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed once the publish is answered (or failed).
func (p *PendingPublish) Done() <-chan struct{} { return p.doneChan() }

// doneChan is Done, made when first asked for.
func (p *PendingPublish) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		if p.resolved.Load() {
			return closedDone
		}
		p.done = make(chan struct{})
	}
	return p.done
}

// Result returns the publish's result once Done is closed; before that it
// returns a REQUEST_TIMEOUT error saying there is no answer yet.
func (p *PendingPublish) Result() (*pigeon.Result, error) {
	if !p.resolved.Load() {
		return nil, errNotAnswered
	}
	return p.res, p.err
}

// Wait blocks until the publish is answered, and returns its result, or
// until ctx ends (REQUEST_TIMEOUT wrapping ctx's error). A ctx that ends
// leaves the publish in flight: the server may still admit the message.
func (p *PendingPublish) Wait(ctx context.Context) (*pigeon.Result, error) {
	if p.resolved.Load() {
		return p.res, p.err
	}
	select {
	case <-p.doneChan():
		return p.res, p.err
	case <-ctx.Done():
		return nil, ctxError(ctx)
	}
}

func (p *PendingPublish) resolve(res *pigeon.Result, err error) {
	p.res, p.err = res, err
	p.mu.Lock()
	p.resolved.Store(true)
	if p.done != nil {
		close(p.done)
	}
	p.mu.Unlock()
	<-p.slots
}

// resolveWith resolves p with the server's decision. The frames carrying
// publishes ask for brief answers: an accepted message comes back without
// its data, which is the data sent. A server that ignores the request
// sends the data, and it is kept.
// res, when not nil, is the Result to resolve p with (the frame decoder
// allocates it with m).
func (p *PendingPublish) resolveWith(status string, m *pigeon.Message, res *pigeon.Result) {
	if err := answeredStatus(status); err != nil {
		p.data = nil
		p.resolve(nil, err)
		return
	}
	if m.Data == nil && status == pigeon.StatusAccepted {
		m.Data = p.data
	}
	p.data = nil
	if res == nil {
		res = new(pigeon.Result)
	}
	res.Status, res.Message = status, m
	p.resolve(res, nil)
}

// PublishAsync queues m for publishing and returns at once with its
// PendingPublish; it blocks only while the session's in-flight bound
// (WithMaxPendingPublishes) is reached, until a slot frees or ctx ends.
// m is encoded before PublishAsync returns, so the caller may reuse it.
// Once queued the publish no longer depends on ctx. Publishes queued while
// the connection's writer is busy leave together in one publish_batch
// frame; each is judged by every gate on its own, as Publish is, and a
// refusal resolves only its own PendingPublish, as does a result of the
// answer that the client cannot read (BAD_REQUEST: the message may have
// been accepted all the same). Publishes in flight together may be
// admitted in any order (as concurrent Publish calls are): wait for an
// answer before publishing what must follow it. Close fails the
// publishes not yet answered; wait for them first.
func (s *Session) PublishAsync(ctx context.Context, m *pigeon.Message) (*PendingPublish, error) {
	return s.publishAsync(ctx, m, false)
}

// publishAsync is PublishAsync; now lets the caller write the frame
// itself when the writer is idle (publishNow).
func (s *Session) publishAsync(ctx context.Context, m *pigeon.Message, now bool) (*PendingPublish, error) {
	if err := checkMessage(m); err != nil {
		return nil, err
	}
	cc, err := s.conn()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	select {
	case s.pubSlots <- struct{}{}:
	default:
		select {
		case s.pubSlots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctxError(ctx)
		case <-cc.done:
			return nil, cc.failed()
		}
	}
	p := &PendingPublish{slots: s.pubSlots}
	if now && cc.publishNow(m, p) {
		return p, nil
	}
	if err := cc.pq.push(m, p); err != nil {
		<-s.pubSlots
		return nil, err
	}
	return p, nil
}

// publishNow writes m's publish frame itself, for p, when the writer is
// idle and nothing is queued (see clientConn); it reports whether it did.
// A synchronous publish waits for its answer anyway: the writer's
// batching, which a stream of asynchronous publishes needs, would only
// add a hand-off to it.
func (cc *clientConn) publishNow(m *pigeon.Message, p *PendingPublish) bool {
	if !cc.wmu.TryLock() {
		return false
	}
	defer cc.wmu.Unlock()
	if cc.queued.Load() != 0 || !cc.pq.empty() {
		return false
	}
	id := strconv.FormatUint(cc.seq.Add(1), 36)
	p.data = sentData(m.Data) // before the answer can come
	cc.mu.Lock()
	if cc.ended {
		cc.mu.Unlock()
		return false // the queue refuses it with the connection's error
	}
	cc.pending[id] = &pendingCall{pub: []*PendingPublish{p}}
	cc.mu.Unlock()
	b := appendPublishHead(cc.wbuf[:0], id)
	b = m.AppendJSON(b)
	b = append(b, '}')
	if cap(b) <= 2*maxBatchBytes+4096 {
		cc.wbuf = b
	}
	if err := cc.writeAlone(b); err != nil {
		cc.fail(err) // fails p with the connection
	}
	return true
}

// appendPublishHead appends the head of a v1 publish frame with id,
// asking for a brief answer, up to its message.
func appendPublishHead(b []byte, id string) []byte {
	b = append(b, `{"op":"publish","id":`...)
	b = jsontext.AppendString(b, id)
	return append(b, `,"brief":true,"message":`...)
}

// pubQueue holds the publishes of a connection not yet taken by its
// writer, as segments of at most MaxPublishBatch messages and about
// maxBatchBytes bytes, each to leave as one frame.
type pubQueue struct {
	ready    chan struct{} // signalled when a segment is queued
	maxBytes int           // of a segment holding more than one message

	mu     sync.Mutex
	segs   []*pubSeg
	spare  []*pubSeg
	closed error
}

// pubSeg is the encoded messages of one frame, comma-separated, and their
// pending answers, in order.
type pubSeg struct {
	body  []byte
	items []*PendingPublish
}

func newPubQueue() *pubQueue {
	return &pubQueue{ready: make(chan struct{}, 1), maxBytes: maxBatchBytes}
}

// fitFrame keeps batches well inside maxFrame, the largest frame the
// server reads, as its contract answer says.
func (q *pubQueue) fitFrame(maxFrame int64) {
	if maxFrame <= 0 {
		return
	}
	q.mu.Lock()
	q.maxBytes = int(min(int64(maxBatchBytes), max(maxFrame/2, maxFrame-4096)))
	q.mu.Unlock()
}

// frameBytes is how many bytes of messages, ids or acks the client puts
// in one frame of many: maxBatchBytes, or less when the server reads
// smaller frames (fitFrame).
func (q *pubQueue) frameBytes() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.maxBytes
}

func (q *pubQueue) newSeg() *pubSeg {
	if n := len(q.spare); n > 0 {
		s := q.spare[n-1]
		q.spare = q.spare[:n-1]
		return s
	}
	return &pubSeg{body: make([]byte, 0, 4096)}
}

// push encodes m onto the last segment and wakes the writer.
func (q *pubQueue) push(m *pigeon.Message, p *PendingPublish) error {
	p.data = sentData(m.Data) // before the answer can come
	q.mu.Lock()
	if q.closed != nil {
		err := q.closed
		q.mu.Unlock()
		return err
	}
	var seg *pubSeg
	if n := len(q.segs); n > 0 && len(q.segs[n-1].items) < publishBatchLimit {
		seg = q.segs[n-1]
	} else {
		seg = q.newSeg()
		q.segs = append(q.segs, seg)
	}
	start := len(seg.body)
	if len(seg.items) > 0 {
		seg.body = append(seg.body, ',')
	}
	seg.body = m.AppendJSON(seg.body)
	if len(seg.items) > 0 && len(seg.body) > q.maxBytes {
		// Past the byte bound: this message starts the next frame.
		next := q.newSeg()
		next.body = append(next.body, seg.body[start+1:]...)
		seg.body = seg.body[:start]
		seg = next
		q.segs = append(q.segs, seg)
	}
	seg.items = append(seg.items, p)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

// sentData is a copy of the data the server stores for a message whose
// data is d, as AppendJSON sends it: d without the whitespace around it,
// or {} when d is empty. A brief answer leaves it out.
func sentData(d []byte) []byte {
	if d = bytes.Trim(d, " \t\r\n"); len(d) == 0 {
		return []byte("{}")
	}
	return bytes.Clone(d)
}

// empty reports whether no publish is queued.
func (q *pubQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.segs) == 0
}

// take removes the first segment, or returns nil.
func (q *pubQueue) take() *pubSeg {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.segs) == 0 {
		return nil
	}
	seg := q.segs[0]
	q.segs[0] = nil
	q.segs = q.segs[1:]
	return seg
}

// recycle keeps a written segment's buffer for the next.
func (q *pubQueue) recycle(seg *pubSeg) {
	if cap(seg.body) > 2*maxBatchBytes {
		return
	}
	seg.body, seg.items = seg.body[:0], nil
	q.mu.Lock()
	if len(q.spare) < 4 {
		q.spare = append(q.spare, seg)
	}
	q.mu.Unlock()
}

// close refuses further publishes with err and fails those still queued.
func (q *pubQueue) close(err error) {
	q.mu.Lock()
	q.closed = err
	segs := q.segs
	q.segs = nil
	q.mu.Unlock()
	for _, seg := range segs {
		failAll(seg.items, err)
	}
}

func failAll(items []*PendingPublish, err error) {
	for _, p := range items {
		p.resolve(nil, err)
	}
}

// nextPublishFrame takes the first queued segment and renders its frame
// into cc.wbuf: a v1 publish frame for one message, a publish_batch
// frame for more. It registers the answer's routing before the frame is
// written; nil when nothing is queued or the connection has ended.
func (cc *clientConn) nextPublishFrame() []byte {
	seg := cc.pq.take()
	if seg == nil {
		return nil
	}
	id := strconv.FormatUint(cc.seq.Add(1), 36)
	cc.mu.Lock()
	if cc.ended {
		err := cc.err
		cc.mu.Unlock()
		failAll(seg.items, err)
		return nil
	}
	cc.pending[id] = &pendingCall{pub: seg.items}
	cc.mu.Unlock()
	b := cc.wbuf[:0]
	if len(seg.items) == 1 {
		b = appendPublishHead(b, id)
		b = append(b, seg.body...)
		b = append(b, '}')
	} else {
		b = append(b, `{"op":"publish_batch","id":`...)
		b = jsontext.AppendString(b, id)
		b = append(b, `,"brief":true,"messages":[`...)
		b = append(b, seg.body...)
		b = append(b, "]}"...)
	}
	cc.pq.recycle(seg)
	if cap(b) <= 2*maxBatchBytes+4096 {
		cc.wbuf = b
	}
	return b
}

// resolvePublishes resolves the publishes one frame carried with its
// answer: a decision for a lone publish, a decisions frame slot by slot
// for a batch, an error frame for all of them. A result of the decisions
// that the decoder could not read (its text in f.Batch, see
// decodeFromServer) fails its own publish alone (unreadResult); the
// others are resolved with their own.
func resolvePublishes(items []*PendingPublish, f *Frame) {
	switch {
	case f.Op == OpError:
		for _, p := range items {
			_, err := answerOf(f)
			p.resolve(nil, err)
		}
	case f.Op == OpDecision && len(items) == 1:
		if f.Message == nil {
			items[0].resolve(nil, pigeon.NewError(pigeon.CodeInternal, "the server's answer has no message: the message may have been accepted"))
			return
		}
		items[0].resolveWith(f.Status, f.Message, nil)
	case f.Op == OpDecisions && len(f.Results) == len(items):
		for i, r := range f.Results {
			switch {
			case f.Batch != nil && f.Batch[i] != nil:
				items[i].resolve(nil, unreadResult(i, len(items), f.Batch[i]))
			case r.Error != nil:
				items[i].resolve(nil, r.Error.Err())
			case r.Message == nil:
				items[i].resolve(nil, pigeon.NewError(pigeon.CodeInternal, "the server's answer has no message: the message may have been accepted"))
			default:
				items[i].resolveWith(r.Status, r.Message, r.result)
			}
		}
	default:
		failAll(items, pigeon.NewError(pigeon.CodeInternal, "the server answered a publish with %q for %d messages: each message may have been accepted", f.Op, len(items)))
	}
}

// answeredStatus refuses a decision whose status is none a broker
// answers a publish with (accepted or duplicate; a refusal is an error):
// BAD_REQUEST, as an answer the client cannot read, saying that the
// message may have been accepted all the same.
func answeredStatus(status string) error {
	if status == pigeon.StatusAccepted || status == pigeon.StatusDuplicate {
		return nil
	}
	return pigeon.NewError(pigeon.CodeBadRequest, "the server answered a publish with status %q, which no broker sends: the message may have been accepted", status)
}

// unreadAnswer is what the n publishes one frame carried fail with when
// the client could not read the server's answer to it, b, at all (err,
// the decoder's refusal, whose code it keeps): unless the answer reads as
// an error frame, it says that the messages may have been accepted all
// the same, as unreadResult says of one result, so that a lone publish is
// not taken for refused and published again without an idempotency key.
func unreadAnswer(b []byte, n int, err error) error {
	if s, e := memberValue(b, "op"); s >= 0 {
		if op, _ := stringValue(b[s:e]); op == OpError {
			return err
		}
	}
	why := err.Error()
	var pe *pigeon.Error
	if errors.As(err, &pe) {
		why = pe.Message
	}
	if n == 1 {
		return pigeon.WrapError(pigeon.ErrorCode(err), err, "the server's answer for this message could not be read (%s): the message may have been accepted", why)
	}
	return pigeon.WrapError(pigeon.ErrorCode(err), err, "the server's answer for these %d messages could not be read (%s): each message may have been accepted", n, why)
}

// unreadResult is what the publish whose result, index of n in a
// decisions answer, is entry fails with when the client could not read
// it (see decodeFromServer): BAD_REQUEST, as a malformed answer fails its
// call, wrapping why it did not decode, and saying that the message may
// have been accepted all the same (with the status the answer gives it,
// when that reads as one the broker answers): the broker judged and maybe
// stored it, so that it is not taken for refused and published again
// without an idempotency key.
func unreadResult(index, n int, entry []byte) error {
	said := ""
	if st := leftOut(OpDecisions, entry).status; st == pigeon.StatusAccepted || st == pigeon.StatusDuplicate {
		said = "; the answer says " + strconv.Quote(st)
	}
	return pigeon.WrapError(pigeon.CodeBadRequest, leftOutError(OpDecisions, entry),
		"the server's answer for this message (index %d of the %d results of its publish_batch) could not be read: the message may have been accepted%s", index, n, said)
}
