package ws

import (
	"encoding/json"
	"time"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/wire"
)

// MaxPublishBatch bounds the messages of one publish_batch frame; the
// frame's bytes are bounded by Options.MaxFrame as any frame's are.
const MaxPublishBatch = 1000

// admitBatch checks a publish_batch frame's bounds and takes one token of
// the connection's publish rate per message, answering the frame itself
// when it goes no further: BAD_REQUEST for an empty or oversized batch,
// RATE_LIMITED when not one message fits the rate. A batch only partly
// within the rate goes on; its messages past the rate are refused
// RATE_LIMITED in their slots.
func (c *conn) admitBatch(f *Frame) bool {
	n := len(f.Batch)
	switch {
	case n == 0:
		c.answer(f.ID, pigeon.NewError(pigeon.CodeBadRequest, `a publish_batch needs "messages"`))
		return false
	case n > MaxPublishBatch:
		c.answer(f.ID, pigeon.NewError(pigeon.CodeBadRequest, "a publish_batch carries at most %d messages, not %d", MaxPublishBatch, n))
		return false
	}
	f.admitted = c.bucket.takeUpTo(time.Now(), n)
	if f.admitted < n {
		c.srv.stats.rateLimited.Add(1)
		c.rateDenied(f, n-f.admitted)
	}
	if f.admitted == 0 {
		c.answer(f.ID, errRateLimited)
		return false
	}
	return true
}

// errRateLimited refuses a publish or request frame, or the messages of a
// batch, past the connection's publish rate (Options.PublishRate).
var errRateLimited = pigeon.NewError(pigeon.CodeRateLimited, "connection publish rate exceeded")

// publishBatch admits the messages of a publish_batch in order through
// Engine.PublishBatch, so through every gate and the audit chain, with
// one durable write for those admitted where the store can, and answers
// with one decisions frame: per message, in the order sent, the decision
// a publish frame would have answered, or the error that refused that
// message alone. The answer is built in buf, from frameBufs.
func (c *conn) publishBatch(f *Frame, caller pigeon.Caller) (answer []byte, buf *[]byte, err error) {
	type outcome struct {
		res *pigeon.Result
		err error
	}
	caller, err = c.atDepth(f, caller, nil)
	if err != nil {
		return nil, nil, err
	}
	out := make([]outcome, len(f.Batch))
	var (
		in   interner
		msgs = make([]*pigeon.Message, 0, f.admitted)
		at   = make([]int, 0, f.admitted)
	)
	for i := range f.admitted {
		m := f.decoded[i]
		if m == nil {
			var err error
			if m, err = batchMessage(f.Batch[i], &in); err != nil {
				out[i].err = err
				continue
			}
		}
		msgs, at = append(msgs, m), append(at, i)
	}
	for j, p := range c.srv.e.PublishBatch(c.ctx, caller, msgs) {
		out[at[j]] = outcome{p.Result, p.Err}
	}
	// A duplicate's slot carries the original, whose data the frame did
	// not send: duplicates that would take the answer past its bound are
	// refused in their slots (see batchAnswerLimit).
	limit := batchAnswerLimit(c.srv.opts.MaxFrame, len(f.Batch))
	size := 64
	for i := range out[:f.admitted] {
		r := out[i].res
		if r == nil {
			continue
		}
		n := answerSize(r, f.Brief)
		if r.Status == pigeon.StatusDuplicate && int64(size+n) > limit {
			out[i] = outcome{err: errBatchAnswerTooLarge(limit)}
			continue
		}
		size += n
	}
	buf = getFrameBuf(size)
	b := appendHead(*buf, OpDecisions, f.ID)
	b = append(b, `,"results":[`...)
	for i, o := range out {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case i >= f.admitted:
			b = appendErrorResult(b, errRateLimited)
		case o.err != nil:
			b = appendErrorResult(b, o.err)
		default:
			b = append(b, `{"status":`...)
			b = jsontext.AppendString(b, o.res.Status)
			b = append(b, `,"message":`...)
			b = appendResultMessage(b, o.res, f.Brief)
			b = append(b, '}')
		}
	}
	return append(b, "]}"...), buf, nil
}

// batchAnswerLimit bounds the decisions answer to a batch of n messages
// in a frame of at most maxFrame bytes: what an answer echoing the
// frame's own messages takes (twice the frame, and each slot's envelope),
// so that duplicates, whose slots carry the originals, cannot make a small
// frame draw an answer a thousand times larger.
func batchAnswerLimit(maxFrame int64, n int) int64 {
	return 2*maxFrame + int64(n)*576
}

// errBatchAnswerTooLarge refuses a duplicate in its slot when the original
// it carries would take the answer past limit. Nothing was stored for it:
// publishing it again (alone, or in a smaller batch) answers it whole.
func errBatchAnswerTooLarge(limit int64) error {
	return pigeon.NewError(pigeon.CodePayloadTooLarge,
		"a duplicate: its original would take the answer past %d bytes; publish it again alone for the original", limit)
}

// batchMessage decodes one message of a batch; a malformed one is
// ENVELOPE_INVALID, as the message of a publish frame would be.
func batchMessage(raw json.RawMessage, in *interner) (*pigeon.Message, error) {
	if m, ok := decodeMessageFast(raw, in); ok {
		return m, nil
	}
	if string(raw) == "null" {
		return nil, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message is required")
	}
	return pigeon.DecodeMessage(raw)
}

// appendErrorResult appends the slot {"error":{…}} of a refused message.
func appendErrorResult(b []byte, err error) []byte {
	body, mErr := json.Marshal(wire.Encode(err))
	if mErr != nil {
		body = []byte(`{"code":"INTERNAL","message":"internal error","details":{}}`)
	}
	b = append(b, `{"error":`...)
	b = append(b, body...)
	return append(b, '}')
}
