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
// which decodes every frame the broker writes once, and nothing more;
// where that decoding refuses a frame, the lists the client reads apart
// (a deliver_batch's "deliveries", a messages answer's "messages" and
// "attempts": a receive's or a replay's) are read entry by entry, as the
// TypeScript, Python and Rust clients read them, so that one entry no
// broker sends is refused alone and the others are handed over.
//
// A frame CheckJSON refuses (a name twice in an object, anywhere; a lone
// surrogate) is refused whole, as all four clients refuse it: readers
// could take its text differently. So is one refused for anything but
// its lists: the frame without them (each written []) must decode.
// Otherwise (entriesApart) each entry is decoded alone, as the only entry
// of a frame of the same op: one that decodes is kept as it decodes; one
// that does not is left out (a nil message in its place, a delivery
// without a message whose attempt is encoding/json's reading of its
// "attempt", 0 when none), its text kept at its index in the frame's
// Batch (nil at every other index, and Batch nil when every entry
// decoded), for the session to refuse it alone: logged, naming its
// index and what can be read of its message (leftOut), never handed
// over nor answered, so the server's ack wait gives it back
// (Session.refused, Session.heldMessages).
//
// A messages answer's "attempts" is read entry by entry too: an entry
// that is no integer an int holds (a fraction, 1.0 or 1e0 included, a
// string, null, a bool, an object, a list) reads as 0, no lease's
// attempt, which refuses its message alone. An "attempts" that is no
// list, null included, is a malformed answer, refused whole (BAD_REQUEST,
// as decodeClientFrame refuses a frame field of the wrong type): its
// attempts cannot be told to its messages, and an absent one, not a null
// one, says the server leased nothing; a messages answer without a list
// of attempts is looked over for its "attempts" for that.
//
// A deliver's "attempt" that is no integer an int holds reads as 0 the
// same way (attemptApart), and the session refuses that delivery alone; a
// deliver refused for anything else is refused whole.
func decodeFromServer(b []byte, in *interner) (*Frame, error) {
	f, err := decodeClientFrame(b, in)
	if err == nil {
		if f.Op == OpMessages && f.Attempts == nil {
			// Absent: nothing leased. Present, the answer decoding without
			// any: null.
			if s, _ := memberValue(b, "attempts"); s >= 0 {
				return f, attemptsNotAList(b[s])
			}
		}
		return f, nil
	}
	s, e := memberValue(b, "op")
	if s < 0 {
		return f, err
	}
	op, _ := stringValue(b[s:e])
	if (op != OpDeliver && op != OpDeliverBatch && op != OpMessages) || pigeon.CheckJSON(b) != nil {
		return f, err
	}
	var (
		g    *Frame
		gErr error
	)
	if op == OpDeliver {
		g = attemptApart(b, in)
	} else {
		g, gErr = entriesApart(b, op, in)
	}
	if g == nil {
		return f, err
	}
	return g, gErr
}

// attemptsNotAList is the refusal of a messages answer whose "attempts",
// starting with c, is no list.
func attemptsNotAList(c byte) error {
	return pigeon.NewError(pigeon.CodeBadRequest, `the server's answer holds "attempts" that is not a list (%s)`, jsonKind(c))
}

// attemptApart decodes a deliver that decodeClientFrame refused, when
// what it refused is an "attempt" that is no integer an int holds (a
// fraction, 1.0 or 1e0 included, one beyond 2^63-1, a string, a bool, an
// object, a list; a null one reads as 0 already): decoded again with it
// written 0, no lease's attempt, which the session refuses, logged, as it
// refuses an attempt of 0 or beyond 2^31-1 (Session.refused). nil when
// its attempt is an integer or it is refused for something else as well:
// it is then refused whole. b is text CheckJSON accepted.
func attemptApart(b []byte, in *interner) *Frame {
	s, e := memberValue(b, "attempt")
	if s < 0 || intText(b[s:e]) {
		return nil
	}
	rest := make([]byte, 0, len(b))
	rest = append(append(append(rest, b[:s]...), '0'), b[e:]...)
	g, err := decodeClientFrame(rest, in)
	if err != nil || g.Op != OpDeliver {
		return nil
	}
	return g
}

// entriesApart decodes a deliver_batch or a messages answer (op) that
// decodeClientFrame refused, its lists read entry by entry (see
// decodeFromServer); nil when it is refused for something else: its lists
// no lists, or the frame without them refused. b is text CheckJSON
// accepted.
func entriesApart(b []byte, op string, in *interner) (*Frame, error) {
	list := [2]int{-1, -1}     // where the list lies
	attempts := [2]int{-1, -1} // where a messages answer's attempts lie
	if op == OpDeliverBatch {
		list[0], list[1] = memberValue(b, "deliveries")
	} else {
		list[0], list[1] = memberValue(b, "messages")
		attempts[0], attempts[1] = memberValue(b, "attempts")
	}
	if list[0] >= 0 && b[list[0]] == 'n' {
		list[0] = -1 // null: no entries, as decodeClientFrame reads it
	}
	if list[0] >= 0 && b[list[0]] != '[' || list[0] < 0 && attempts[0] < 0 {
		return nil, nil
	}
	g, err := decodeClientFrame(emptied(b, list, attempts), in)
	if err != nil || g.Op != op {
		return nil, nil
	}
	if attempts[0] >= 0 {
		n, ok := entryAttempts(b, attempts[0])
		if !ok {
			g.Attempts = nil
			return g, attemptsNotAList(b[attempts[0]])
		}
		g.Attempts = n
	}
	if list[0] >= 0 {
		readEntries(g, b, list[0], in)
	}
	return g, nil
}

// emptied is b with each of the values at a and c (where s, e: b[s:e];
// s -1: none) written [].
func emptied(b []byte, a, c [2]int) []byte {
	if c[0] >= 0 && (a[0] < 0 || c[0] < a[0]) {
		a, c = c, a
	}
	out, at := make([]byte, 0, len(b)+4), 0
	for _, r := range [2][2]int{a, c} {
		if r[0] >= 0 {
			out = append(append(out, b[at:r[0]]...), "[]"...)
			at = r[1]
		}
	}
	return append(out, b[at:]...)
}

// readEntries fills the list of g, a deliver_batch or a messages answer
// decoded without it, from the list at b[i], each entry decoded alone
// (entryAlone); the text of each entry that does not decode goes to
// g.Batch, at its index (see decodeFromServer).
func readEntries(g *Frame, b []byte, i int, in *interner) {
	var (
		left  []json.RawMessage // in step with the entries: those left out
		n     int
		batch = g.Op == OpDeliverBatch
	)
	if batch {
		g.Deliveries, g.delivered = []DeliveryEntry{}, []*pigeon.Delivery{}
	} else {
		g.Messages = []*pigeon.Message{}
	}
	w := walker{b: b}
	w.array(i, func(j int) int {
		e := jsontext.SkipValue(b, j)
		h, err := decodeClientFrame(entryAlone(g.Op, b[j:e]), in)
		ok := err == nil && h.Op == g.Op && (batch && len(h.Deliveries) == 1 || !batch && len(h.Messages) == 1)
		switch {
		case ok && batch:
			var pd *pigeon.Delivery
			if len(h.delivered) == 1 {
				pd = h.delivered[0]
			}
			g.Deliveries, g.delivered = append(g.Deliveries, h.Deliveries[0]), append(g.delivered, pd)
		case ok:
			g.Messages = append(g.Messages, h.Messages[0])
		case batch:
			_, _, attempt := leftOut(b[j:e], true)
			g.Deliveries, g.delivered = append(g.Deliveries, DeliveryEntry{Attempt: attempt}), append(g.delivered, nil)
		default:
			g.Messages = append(g.Messages, nil)
		}
		if !ok && left == nil {
			left = make([]json.RawMessage, n, n+1)
		}
		if left != nil {
			var text json.RawMessage
			if !ok {
				text = append(text, b[j:e]...) // b is the reader's, reused
			}
			left = append(left, text)
		}
		n++
		return e
	})
	g.Batch = left
}

// entryAlone is the frame of op (deliver_batch or messages) whose list
// holds entry alone: the entry at the depth it has in any such frame, so
// that it decodes as it would beside others.
func entryAlone(op string, entry []byte) []byte {
	head := `{"op":"messages","messages":[`
	if op == OpDeliverBatch {
		head = `{"op":"deliver_batch","deliveries":[`
	}
	out := make([]byte, 0, len(head)+len(entry)+2)
	return append(append(append(out, head...), entry...), "]}"...)
}

// leftOut reads what can be read of an entry left out of a list (see
// decodeFromServer), a delivery (batch) or a message, as encoding/json
// reads it: its message's id, when a string; its sequence, when an
// integer a uint64 holds; a delivery's attempt, when an integer an int
// holds; each otherwise zero.
func leftOut(entry []byte, batch bool) (id string, seq uint64, attempt int) {
	msg := entry
	if batch {
		var d struct {
			Attempt json.RawMessage `json:"attempt"`
			Message json.RawMessage `json:"message"`
		}
		_ = json.Unmarshal(entry, &d)
		if n, err := strconv.ParseInt(string(d.Attempt), 10, strconv.IntSize); err == nil {
			attempt = int(n)
		}
		msg = d.Message
	}
	var m struct {
		ID       json.RawMessage `json:"id"`
		Sequence json.RawMessage `json:"sequence"`
	}
	if json.Unmarshal(msg, &m) == nil {
		_ = json.Unmarshal(m.ID, &id)
		if n, err := strconv.ParseUint(string(m.Sequence), 10, 64); err == nil {
			seq = n
		}
	}
	return id, seq, attempt
}

// leftOutError is why the entry left out of a list of op did not decode
// alone, as encoding/json, or the frame decoder, says it.
func leftOutError(op string, entry []byte) error {
	var v any = new(pigeon.Message)
	if op == OpDeliverBatch {
		v = new(DeliveryEntry)
	}
	if err := pigeon.CheckNames(entry, v); err != nil {
		return err
	}
	if err := json.Unmarshal(entry, v); err != nil {
		return err
	}
	_, err := decodeClientFrame(entryAlone(op, entry), nil)
	return err
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
