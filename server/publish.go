package server

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"pigeon/internal/predecoded"

	"pigeon"
)

// publish is POST /v1/messages. The body is read into a pooled buffer and
// decoded in one pass (pigeon.DecodeMessage); the message keeps no memory of
// the buffer.
func publish(rq *request) (int, any, error) {
	buf := bodyBuffers.Get().(*[]byte)
	defer putBodyBuffer(buf)
	b, err := readBodyInto((*buf)[:0], rq.w, rq.r, rq.s.opts.MaxBody)
	*buf = b[:0]
	if err != nil {
		return 0, nil, err
	}
	if b = trimJSONSpace(b); len(b) == 0 {
		return 0, nil, pigeon.NewError(pigeon.CodeBadRequest, "a JSON body is required")
	}
	m, err := decodePublish(b)
	if err != nil {
		return 0, nil, err
	}
	c, err := rq.caller(m.ContractID)
	if err != nil {
		return 0, nil, err
	}
	res, err := rq.s.e.Publish(rq.ctx, c, m)
	if err != nil {
		return 0, nil, err
	}
	return publishStatus(res), res, nil
}

// decodePublish decodes a publish body as readBody then pigeon.DecodeMessage
// did, with the same message or the same refusal: the checks of readBody
// (BAD_REQUEST for text that is not JSON or nests too deeply,
// DUPLICATE_KEY, INVALID_UTF8), then ENVELOPE_INVALID for JSON that is not
// an envelope. An envelope is checked once; the checks run again, in that
// order, only to name a refusal.
func decodePublish(b []byte) (*pigeon.Message, error) {
	m, err := predecoded.DecodeMessage(b) // the handler hands it on untouched
	if err == nil {
		return m.(*pigeon.Message), nil
	}
	if cerr := pigeon.CheckJSON(b); cerr != nil {
		return nil, cerr
	}
	return nil, err
}

// maxPooledBody is the largest body buffer kept for reuse.
const maxPooledBody = 64 << 10

// maxBodyPrealloc bounds the room made for a body from its declared
// Content-Length before any of it is read; beyond it the buffer grows with
// the bytes that come. A declared length costs the client nothing to send.
const maxBodyPrealloc = 64 << 10

// bodyBuffers hold request bodies on the publish path.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func putBodyBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBody {
		bodyBuffers.Put(b)
	}
}

// readBodyInto appends the request body to buf, within limit, as readBody
// reads it (413 PAYLOAD_TOO_LARGE beyond the limit) but without checking
// it. It returns the grown buffer even on an error.
func readBodyInto(buf []byte, w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := plainBody(r); err != nil {
		return buf, err
	}
	if r.ContentLength > limit {
		return buf, pigeon.NewError(pigeon.CodePayloadTooLarge, "the body exceeds %d bytes", limit)
	}
	if n := min(r.ContentLength, maxBodyPrealloc); n > 0 && int64(cap(buf)-len(buf)) < n+1 {
		buf = append(buf, make([]byte, n+1)...)[:len(buf)]
	}
	body := http.MaxBytesReader(bareWriter(w), r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return buf, pigeon.NewError(pigeon.CodePayloadTooLarge, "the body exceeds %d bytes", limit)
			}
			return buf, pigeon.WrapError(pigeon.CodeBadRequest, err, "the body could not be read")
		}
	}
}
