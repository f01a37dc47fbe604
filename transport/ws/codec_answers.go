package ws

import (
	"encoding/json"
	"slices"
	"strconv"

	"pigeon"
	"pigeon/internal/wire"
)

// The members of a delivery and of a result.
const (
	dAttempt = iota
	dMessage
)

const (
	rStatus = iota
	rMessage
	rError
)

var (
	deliveryNames = names{dAttempt: "attempt", dMessage: "message"}
	resultNames   = names{rStatus: "status", rMessage: "message", rError: "error"}
)

// handoff is a delivered message and the Delivery its handler gets, in
// one allocation.
type handoff struct {
	d pigeon.Delivery
	m pigeon.Message
}

// deliveries decodes the deliveries of a deliver_batch: objects of an
// attempt and a message. Each message comes with the Delivery its handler
// gets (delivered, parallel to the entries; nil for an entry without a
// message).
func (w *walker) deliveries(i int) ([]DeliveryEntry, []*pigeon.Delivery, int) {
	// Gathered on the stack, up to what the server puts in one frame,
	// then copied out at their size.
	var (
		outBuf [maxDeliverBatch]DeliveryEntry
		pdBuf  [maxDeliverBatch]*pigeon.Delivery
	)
	out, delivered := outBuf[:0], pdBuf[:0]
	end := w.array(i, func(j int) int {
		var (
			d  DeliveryEntry
			pd *pigeon.Delivery
		)
		e := w.object(j, deliveryNames, func(k, j int) int {
			if k == dMessage {
				if w.b[j] != '{' {
					return -1
				}
				h := new(handoff)
				d.Message, pd = &h.m, &h.d
				return w.messageInto(&h.m, j, 3)
			}
			n, e := w.integer(j, strconv.IntSize)
			d.Attempt = int(n)
			return e
		})
		out, delivered = append(out, d), append(delivered, pd)
		return e
	})
	if end < 0 {
		return nil, nil, end
	}
	entries := make([]DeliveryEntry, len(out))
	copy(entries, out)
	return entries, slices.Clone(delivered), end
}

// results decodes the results of a decisions answer. Each message comes
// with the Result its publish is resolved with, in one allocation.
func (w *walker) results(i int) ([]BatchResult, int) {
	out := []BatchResult{}
	end := w.array(i, func(j int) int {
		var r BatchResult
		e := w.object(j, resultNames, func(k, j int) int {
			switch k {
			case rStatus:
				return w.str(j, &r.Status, true)
			case rMessage:
				if w.b[j] != '{' {
					return -1
				}
				h := new(resultHandoff)
				r.Message, r.result = &h.m, &h.r
				return w.messageInto(&h.m, j, 3)
			}
			// rError: decoded by encoding/json, an object only.
			if w.b[j] != '{' {
				return -1
			}
			e := w.value(j, 3)
			if e < 0 {
				return -1
			}
			r.Error = new(wire.Error)
			// encoding/json matches names in any case; the frame's
			// decoder refuses a name in another case (CheckNames).
			if pigeon.CheckNames(w.b[j:e], r.Error) != nil || json.Unmarshal(w.b[j:e], r.Error) != nil {
				return -1
			}
			return e
		})
		out = append(out, r)
		return e
	})
	return out, end
}

// resultHandoff is a publish's answered message and the Result its
// PendingPublish is resolved with, in one allocation.
type resultHandoff struct {
	r pigeon.Result
	m pigeon.Message
}
