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
	// Room for about as many results as the text holds brief ones.
	out := make([]BatchResult, 0, min(1+(len(w.b)-i)/briefResultLen, MaxPublishBatch))
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

// briefResultLen is about the length of a result that carries an
// accepted message without its data, as a decisions answer does.
const briefResultLen = 512

// resultHandoff is a publish's answered message and the Result its
// PendingPublish is resolved with, in one allocation.
type resultHandoff struct {
	r pigeon.Result
	m pigeon.Message
}

// decodeFromServer is the client's reader's decoder: decodeClientFrame,
// which decodes every frame the broker writes once, and nothing more;
// where that decoding refuses a frame, the lists the client reads apart
// (entryList: a deliver_batch's "deliveries", a messages answer's
// "messages" and "attempts", a receive's or a replay's, a decisions
// answer's "results") are read entry by entry, and a deliver's "attempt"
// and "message" apart from the rest of it (deliverApart), as the
// TypeScript, Python and Rust clients read them, so that one entry no
// broker sends is refused alone and the others are handed over.
//
// A frame CheckJSON refuses (a name twice in an object, anywhere; a lone
// surrogate) is refused whole, as all four clients refuse it: readers
// could take its text differently. So is one refused for anything but
// its lists: the frame without them (each written []) must decode.
// Otherwise (entriesApart) each entry is decoded alone, as the only entry
// of a frame of the same op (entryAlone): one that decodes is kept as it
// decodes; one that does not is left out (leaveOut: a nil message in its
// place, a result of nothing, a delivery without a message whose attempt
// is encoding/json's reading of its "attempt", 0 when none), its text
// kept at its index in the frame's Batch (nil at every other index, and
// Batch nil when every entry decoded). The session refuses it alone: a
// delivery or a message is logged, naming its index and what can be read
// of its message (leftOut), never handed over nor answered, so the
// server's ack wait gives it back (Session.refused, Session.heldMessages);
// a result fails its own publish alone, BAD_REQUEST (resolvePublishes),
// the broker having maybe accepted the message.
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
// same way, and a deliver's "message" that does not decode alone is left
// out as a list's entry is, its text the frame's Batch's one entry
// (deliverApart); the session refuses that delivery alone. A deliver
// refused for anything else is refused whole.
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
	if (op != OpDeliver && entryList(op) == "") || pigeon.CheckJSON(b) != nil {
		return f, err
	}
	var (
		g    *Frame
		gErr error
	)
	if op == OpDeliver {
		g = deliverApart(b, in)
	} else {
		g, gErr = entriesApart(b, op, in)
	}
	if g == nil {
		return f, err
	}
	return g, gErr
}

// entryList is the member of a frame of op whose list the client's
// reader reads entry by entry (see decodeFromServer): a deliver_batch's
// "deliveries", a messages answer's "messages", a decisions answer's
// "results"; "" for any other op.
func entryList(op string) string {
	switch op {
	case OpDeliverBatch:
		return "deliveries"
	case OpMessages:
		return "messages"
	case OpDecisions:
		return "results"
	}
	return ""
}

// attemptsNotAList is the refusal of a messages answer whose "attempts",
// starting with c, is no list.
func attemptsNotAList(c byte) error {
	return pigeon.NewError(pigeon.CodeBadRequest, `the server's answer holds "attempts" that is not a list (%s)`, jsonKind(c))
}

// deliverApart decodes a deliver that decodeClientFrame refused, its
// "attempt" and its "message" read apart from the rest of it. An attempt
// that is no integer an int holds (a fraction, 1.0 or 1e0 included, one
// beyond 2^63-1, a string, a bool, an object, a list; a null one reads
// as 0 already) reads as 0, no lease's attempt, which the session
// refuses, logged, as it refuses an attempt of 0 or beyond 2^31-1
// (Session.refused). A message (but null, which reads as none already)
// is decoded alone, as the message of a deliver of nothing else
// (entryAlone): one that does not decode is left out (Message nil), its
// text the frame's Batch's one entry, for the session to refuse, logged,
// as it refuses a deliver_batch's entry left out (Session.deliver). nil
// when the frame without them (the attempt written 0, the message null)
// does not decode: it is refused whole. b is text CheckJSON accepted.
func deliverApart(b []byte, in *interner) *Frame {
	attempt, msg := rewrite{text: "0"}, rewrite{text: "null"}
	attempt.s, attempt.e = memberValue(b, "attempt")
	msg.s, msg.e = memberValue(b, "message")
	if attempt.s >= 0 && intText(b[attempt.s:attempt.e]) {
		attempt.s = -1 // decoded with the rest
	}
	if msg.s >= 0 && b[msg.s] == 'n' {
		msg.s = -1 // null: no message, as decodeClientFrame reads it
	}
	if attempt.s < 0 && msg.s < 0 {
		return nil
	}
	g, err := decodeClientFrame(rewritten(b, attempt, msg), in)
	if err != nil || g.Op != OpDeliver {
		return nil
	}
	if msg.s >= 0 {
		text := b[msg.s:msg.e]
		if h, err := decodeClientFrame(entryAlone(OpDeliver, text), in); err == nil && h.Op == OpDeliver && h.Message != nil {
			g.Message = h.Message
		} else {
			g.Batch = []json.RawMessage{bytes.Clone(text)} // b is the reader's, reused
		}
	}
	return g
}

// entriesApart decodes a frame of op (a deliver_batch, a messages or a
// decisions answer) that decodeClientFrame refused, its lists read entry
// by entry (see decodeFromServer); nil when it is refused for something
// else: its lists no lists, or the frame without them refused. b is text
// CheckJSON accepted.
func entriesApart(b []byte, op string, in *interner) (*Frame, error) {
	list := rewrite{text: "[]"}                   // the list read entry by entry
	attempts := rewrite{s: -1, e: -1, text: "[]"} // a messages answer's attempts
	list.s, list.e = memberValue(b, entryList(op))
	if op == OpMessages {
		attempts.s, attempts.e = memberValue(b, "attempts")
	}
	if list.s >= 0 && b[list.s] == 'n' {
		list.s = -1 // null: no entries, as decodeClientFrame reads it
	}
	if list.s >= 0 && b[list.s] != '[' || list.s < 0 && attempts.s < 0 {
		return nil, nil
	}
	g, err := decodeClientFrame(rewritten(b, list, attempts), in)
	if err != nil || g.Op != op {
		return nil, nil
	}
	if attempts.s >= 0 {
		n, ok := entryAttempts(b, attempts.s)
		if !ok {
			g.Attempts = nil
			return g, attemptsNotAList(b[attempts.s])
		}
		g.Attempts = n
	}
	if list.s >= 0 {
		readEntries(g, b, list.s, in)
	}
	return g, nil
}

// rewrite is where a value lies in a frame's text b (b[s:e]; s -1:
// nowhere), and the text written in its place for the frame to be
// decoded without it.
type rewrite struct {
	s, e int
	text string
}

// rewritten is b with the value of each of rs (which do not overlap)
// written as its text.
func rewritten(b []byte, rs ...rewrite) []byte {
	slices.SortFunc(rs, func(x, y rewrite) int { return x.s - y.s })
	out, at := make([]byte, 0, len(b)+8), 0
	for _, r := range rs {
		if r.s >= 0 {
			out = append(append(out, b[at:r.s]...), r.text...)
			at = r.e
		}
	}
	return append(out, b[at:]...)
}

// readEntries fills the list of g, a frame of a list op (entryList)
// decoded without it, from the list at b[i], each entry decoded alone
// (entryAlone); the text of each entry that does not decode goes to
// g.Batch, at its index (see decodeFromServer).
func readEntries(g *Frame, b []byte, i int, in *interner) {
	var (
		left []json.RawMessage // in step with the entries: those left out
		n    int
	)
	switch g.Op {
	case OpDeliverBatch:
		g.Deliveries, g.delivered = []DeliveryEntry{}, []*pigeon.Delivery{}
	case OpDecisions:
		g.Results = []BatchResult{}
	default:
		g.Messages = []*pigeon.Message{}
	}
	w := walker{b: b}
	w.array(i, func(j int) int {
		e := jsontext.SkipValue(b, j)
		h, err := decodeClientFrame(entryAlone(g.Op, b[j:e]), in)
		ok := err == nil && h.Op == g.Op && takeEntry(g, h)
		if !ok {
			leaveOut(g, b[j:e])
			if left == nil {
				left = make([]json.RawMessage, n, n+1)
			}
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

// takeEntry appends to the list of g the one entry of h, a frame of g's
// op decoded from that entry alone (entryAlone); false, nothing
// appended, when h holds another number of entries.
func takeEntry(g, h *Frame) bool {
	switch g.Op {
	case OpDeliverBatch:
		if len(h.Deliveries) != 1 {
			return false
		}
		var pd *pigeon.Delivery
		if len(h.delivered) == 1 {
			pd = h.delivered[0]
		}
		g.Deliveries, g.delivered = append(g.Deliveries, h.Deliveries[0]), append(g.delivered, pd)
	case OpDecisions:
		if len(h.Results) != 1 {
			return false
		}
		g.Results = append(g.Results, h.Results[0])
	default:
		if len(h.Messages) != 1 {
			return false
		}
		g.Messages = append(g.Messages, h.Messages[0])
	}
	return true
}

// leaveOut appends to the list of g what stands for entry, which did not
// decode alone: a delivery without a message, its attempt as leftOut
// reads it; a result of nothing; a nil message.
func leaveOut(g *Frame, entry []byte) {
	switch g.Op {
	case OpDeliverBatch:
		d := DeliveryEntry{Attempt: leftOut(g.Op, entry).attempt}
		g.Deliveries, g.delivered = append(g.Deliveries, d), append(g.delivered, nil)
	case OpDecisions:
		g.Results = append(g.Results, BatchResult{})
	default:
		g.Messages = append(g.Messages, nil)
	}
}

// entryAlone is the frame of op (a list op, see entryList) whose list
// holds entry alone, or the deliver whose message is entry: the entry at
// the depth it has in any such frame, so that it decodes as it would
// beside others.
func entryAlone(op string, entry []byte) []byte {
	out := make([]byte, 0, len(entry)+40)
	out = append(append(append(out, `{"op":"`...), op...), `","`...)
	if op == OpDeliver {
		out = append(append(out, `message":`...), entry...)
		return append(out, '}')
	}
	out = append(append(append(out, entryList(op)...), `":[`...), entry...)
	return append(out, "]}"...)
}

// entryRead is what can be read of an entry left out (see leftOut).
type entryRead struct {
	id      string // its message's
	seq     uint64 // its message's
	attempt int    // a delivery's
	status  string // a result's
}

// leftOut reads what can be read of an entry of a frame of op left out
// (see decodeFromServer), as encoding/json reads it: its message's id,
// when a string; its sequence, when an integer a uint64 holds; a
// delivery's attempt, when an integer an int holds; a result's status,
// when a string; each otherwise zero. The entry is a delivery (a
// deliver_batch's) or a result (a decisions answer's), each with its
// message in "message", or a message (a messages answer's, a deliver's).
func leftOut(op string, entry []byte) (r entryRead) {
	msg := entry
	if op == OpDeliverBatch || op == OpDecisions {
		var d struct {
			Attempt json.RawMessage `json:"attempt"`
			Status  json.RawMessage `json:"status"`
			Message json.RawMessage `json:"message"`
		}
		_ = json.Unmarshal(entry, &d)
		if n, err := strconv.ParseInt(string(d.Attempt), 10, strconv.IntSize); err == nil && op == OpDeliverBatch {
			r.attempt = int(n)
		}
		if op == OpDecisions {
			_ = json.Unmarshal(d.Status, &r.status)
		}
		msg = d.Message
	}
	var m struct {
		ID       json.RawMessage `json:"id"`
		Sequence json.RawMessage `json:"sequence"`
	}
	if json.Unmarshal(msg, &m) == nil {
		_ = json.Unmarshal(m.ID, &r.id)
		if n, err := strconv.ParseUint(string(m.Sequence), 10, 64); err == nil {
			r.seq = n
		}
	}
	return r
}

// leftOutError is why the entry left out of a frame of op did not decode
// alone, as encoding/json, or the frame decoder, says it.
func leftOutError(op string, entry []byte) error {
	var v any
	switch op {
	case OpDeliverBatch:
		v = new(DeliveryEntry)
	case OpDecisions:
		v = new(BatchResult)
	default:
		v = new(pigeon.Message)
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
