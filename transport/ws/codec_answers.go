package ws

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"pigeon"
	"pigeon/internal/jsontext"
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

// decodeFromServer is the client's reader's decoder: decodeClientFrame,
// with the "attempts" of a messages answer (a receive's) read entry by
// entry, as the TypeScript, Python and Rust clients read it. An entry
// that is no integer an int holds (a fraction, 1.0 or 1e0 included, a
// string, null, a bool, an object, a list) reads as 0, no lease's
// attempt: the pull refuses its message alone (heldMessages) and takes
// the others. An "attempts" that is no list, null included, is a
// malformed answer, refused whole (BAD_REQUEST, as decodeClientFrame
// refuses a frame field of the wrong type): its attempts cannot be told
// to its messages, and an absent one, not a null one, says the server
// leased nothing. A push's attempts, a deliver's "attempt" and each
// deliver_batch entry's, are read the same way (pushedApart): one that is
// no integer an int holds reads as 0, and the session refuses that
// delivery alone (Session.refused) and hands over the others. Every other
// frame decodes as decodeClientFrame decodes it, once. The broker writes
// integers, which that decoding takes; a messages answer without a list
// of them is looked over for its "attempts", and decoded again, without
// them, only when it has one; a push is looked over only when that
// decoding refused it.
func decodeFromServer(b []byte, in *interner) (*Frame, error) {
	f, err := decodeClientFrame(b, in)
	if err == nil && (f.Op != OpMessages || f.Attempts != nil) {
		return f, nil
	}
	if err != nil {
		if g := pushedApart(b, in); g != nil {
			return g, nil
		}
	}
	// A messages answer without attempts (absent, or null), or a frame
	// refused, perhaps for its attempts alone.
	s, e := memberValue(b, "attempts")
	if s < 0 || pigeon.CheckJSON(b) != nil {
		return f, err
	}
	// The frame without its attempts, which are read apart.
	rest := make([]byte, 0, len(b)-(e-s)+2)
	rest = append(append(append(rest, b[:s]...), "[]"...), b[e:]...)
	g, gErr := decodeClientFrame(rest, in)
	if g == nil || g.Op != OpMessages {
		return f, err // no answer whose attempts the client reads
	}
	if gErr != nil {
		return g, gErr
	}
	attempts, ok := entryAttempts(b, s)
	if !ok {
		g.Attempts = nil
		return g, pigeon.NewError(pigeon.CodeBadRequest, `the server's answer holds "attempts" that is not a list (%s)`, jsonKind(b[s]))
	}
	g.Attempts = attempts
	return g, nil
}

// pushedApart decodes a deliver or deliver_batch push that
// decodeClientFrame refused, when what it refused is an attempt that is
// no integer an int holds (a fraction, 1.0 or 1e0 included, one beyond
// 2^63-1, a string, a bool, an object, a list; a null one reads as 0
// already): the frame's "attempt", or the "attempt" of entries of its
// "deliveries". The frame
// is decoded again with each such attempt written 0, no lease's attempt,
// which the session refuses, logged, for that delivery alone, as it
// refuses an attempt of 0 or beyond 2^31-1 (Session.refused); the other
// deliveries keep their own. nil when b is no such push, CheckJSON
// refuses it, none of its attempts is no integer, or it is refused for
// something else as well: it is then refused whole, as before, with the
// error decodeClientFrame gave.
func pushedApart(b []byte, in *interner) *Frame {
	s, e := memberValue(b, "op")
	if s < 0 {
		return nil
	}
	op, ok := stringValue(b[s:e])
	if !ok || (op != OpDeliver && op != OpDeliverBatch) || pigeon.CheckJSON(b) != nil {
		return nil
	}
	var bad [][2]int // where each attempt no int holds lies, in order
	if op == OpDeliver {
		if s, e := memberValue(b, "attempt"); s >= 0 && !intText(b[s:e]) {
			bad = append(bad, [2]int{s, e})
		}
	} else if s, _ := memberValue(b, "deliveries"); s >= 0 {
		w := walker{b: b}
		w.array(s, func(j int) int {
			if s, e := memberValueAt(b, j, "attempt"); s >= 0 && !intText(b[s:e]) {
				bad = append(bad, [2]int{s, e})
			}
			return jsontext.SkipValue(b, j)
		})
	}
	if len(bad) == 0 {
		return nil
	}
	rest, at := make([]byte, 0, len(b)), 0
	for _, r := range bad {
		rest = append(append(rest, b[at:r[0]]...), '0')
		at = r[1]
	}
	rest = append(rest, b[at:]...)
	g, err := decodeClientFrame(rest, in)
	if err != nil || g.Op != op {
		return nil
	}
	return g
}

// intText reports whether the JSON value v is an integer an int holds,
// as encoding/json reads one into an int.
func intText(v []byte) bool {
	_, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	return err == nil
}

// memberValue returns where the value of the member name of the JSON
// object b lies (b[s:e]), the member's name read as encoding/json reads
// it (escapes decoded); -1, -1 when b is no object or has no such member
// before what it cannot read. It checks nothing else: a caller checks b
// (pigeon.CheckJSON, which refuses a name twice) before it reads the
// value.
func memberValue(b []byte, name string) (s, e int) { return memberValueAt(b, 0, name) }

// memberValueAt is memberValue of the object at b[i] (after white space).
func memberValueAt(b []byte, i int, name string) (s, e int) {
	i = jsontext.SpaceEnd(b, i)
	if i >= len(b) || b[i] != '{' {
		return -1, -1
	}
	for i = jsontext.SpaceEnd(b, i+1); i < len(b) && b[i] == '"'; {
		ne := jsontext.SkipString(b, i)
		j := jsontext.SpaceEnd(b, ne)
		if j >= len(b) || b[j] != ':' {
			return -1, -1
		}
		if j = jsontext.SpaceEnd(b, j+1); j >= len(b) {
			return -1, -1
		}
		e := jsontext.SkipValue(b, j)
		if nameIs(b[i:ne], name) {
			return j, e
		}
		if i = jsontext.SpaceEnd(b, e); i >= len(b) || b[i] != ',' {
			return -1, -1
		}
		i = jsontext.SpaceEnd(b, i+1)
	}
	return -1, -1
}

// nameIs reports whether the JSON string q (quotes included) is name.
func nameIs(q []byte, name string) bool {
	if bytes.IndexByte(q, '\\') < 0 {
		return len(q) == len(name)+2 && string(q[1:len(q)-1]) == name
	}
	s, ok := stringValue(q)
	return ok && s == name
}

// entryAttempts reads the list at b[i], a receive answer's "attempts",
// entry by entry: an integer an int holds as itself, any other entry as
// 0, no lease's attempt (see decodeFromServer); ok is false when the
// value there is no list. b is text CheckJSON accepted.
func entryAttempts(b []byte, i int) ([]int, bool) {
	w := walker{b: b}
	out := []int{}
	end := w.array(i, func(j int) int {
		e := jsontext.SkipValue(b, j)
		n, err := strconv.ParseInt(string(b[j:e]), 10, strconv.IntSize)
		if err != nil {
			n = 0
		}
		out = append(out, int(n))
		return e
	})
	return out, end >= 0
}

// jsonKind names the kind of the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case 'n':
		return "null"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a bool"
	}
	return "a number"
}
