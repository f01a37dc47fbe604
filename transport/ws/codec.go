package ws

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
)

// The frame codec's fast path: the frames of the publish path (publish,
// publish_batch, request, and the decision, decisions, reply, deliver,
// deliver_batch and messages answers) decode without reflection, walked by
// one walker in one of two modes.
//
// Strict (decodeFrameStrict), it reads a frame as it arrives and takes it
// only when pigeon.CheckJSON would accept it and encoding/json would
// decode it to the same Frame, checking as it walks: strings plain (no
// escape, no control character, valid UTF-8), no member twice in an
// object, numbers in JSON's grammar, structure exact, nothing after the
// frame; the values it keeps raw or hands on (data, error, the messages of
// a publish_batch) are validated with jsontext.ValidateValue within the depth
// CheckJSON allows where they sit. It never fails: it decodes or gives up.
// The server's reader decodes a message's data where it would validate it
// (walker.data); the client's reader takes it as the server sent it
// (walker.trusted).
//
// Otherwise (decodeFrameFast) it reads only text that CheckJSON accepted,
// and decodes escaped strings too. In both modes it gives up (ok false) on
// anything it does not know exactly: a name it does not know or spelled in
// another case, a null, a number that is not an integer. DecodeFrame then
// checks and decodes the frame the long way (CheckJSON, the walker,
// encoding/json), so the paths never answer differently
// (FuzzDecodeFrameFast checks that they agree).

// checkDepth is the nesting pigeon.CheckJSON allows: MaxJSONDepth plus the
// envelope's and frame's levels (TestCheckDepth holds the two together).
const checkDepth = pigeon.MaxJSONDepth + 8

// walker walks one JSON text, b. Its methods take the index of a value
// and return the index just past it, or -1 to give up.
type walker struct {
	b      []byte
	in     *interner // nil: share no strings
	strict bool      // b is unchecked: see above
	// data, strict only, decodes each message's data for the engine
	// (predecoded) where it would otherwise only validate it: the
	// server's reader, whose messages go on to be published.
	data bool
	pre  []predecoded.Data // a batch's room for its next messages' decoded data
	// trusted, strict only, takes each message's data as it is, finding
	// its end without validating it: the client's reader, whose frames
	// come from the server, which sends only data its decoder accepted.
	// The rest of the frame is checked as strict checks it.
	trusted bool
}

// names are the members of an object the walker decodes, in the order the
// encoders write them; a member is known by its index (at most 32).
type names []string

// at returns the index in ns of the name that starts at b[i] (its
// opening quote) and the index just past the name, or -1 when it is none
// of them byte for byte. The member after the last one is the likely
// next: it is tried first, then those after it, as the encoders leave
// members out but never reorder them. A known name holds no quote and no
// backslash, and ends in neither: the string at b[i] is one when its
// bytes follow the quote and a quote follows them.
func (ns names) at(b []byte, i, from int) (int, int) {
	for n := range len(ns) {
		k := from + n
		if k >= len(ns) {
			k -= len(ns)
		}
		if e := i + 1 + len(ns[k]); e < len(b) && b[e] == '"' && string(b[i+1:e]) == ns[k] {
			return k, e + 1
		}
	}
	return -1, -1
}

// object walks the object at b[i] (after white space): fn gets the index
// in known of each member's name and the index of its value. A name not
// in known (another case, an escape: encoding/json decides) or seen twice
// in the object (CheckJSON refuses) gives up; known names are plain, so
// names need no other check.
func (w *walker) object(i int, known names, fn func(k, j int) int) int {
	b := w.b
	i = jsontext.SpaceEnd(b, i)
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	if i = jsontext.SpaceEnd(b, i+1); i < len(b) && b[i] == '}' {
		return i + 1
	}
	var seen uint32
	k := -1
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		var ne int
		if k, ne = known.at(b, i, k+1); k < 0 || seen&(1<<k) != 0 {
			return -1
		}
		seen |= 1 << k
		if i = jsontext.SpaceEnd(b, ne); i >= len(b) || b[i] != ':' {
			return -1
		}
		if i = jsontext.SpaceEnd(b, i+1); i >= len(b) {
			return -1
		}
		if i = fn(k, i); i < 0 {
			return -1
		}
		var done bool
		if i, done = w.next(i, '}'); done || i < 0 {
			return i
		}
	}
}

// array walks the array at b[i] as object walks an object: fn gets the
// index of each element.
func (w *walker) array(i int, fn func(j int) int) int {
	b := w.b
	i = jsontext.SpaceEnd(b, i)
	if i >= len(b) || b[i] != '[' {
		return -1
	}
	if i = jsontext.SpaceEnd(b, i+1); i < len(b) && b[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(b) {
			return -1
		}
		if i = fn(i); i < 0 {
			return -1
		}
		var done bool
		if i, done = w.next(i, ']'); done || i < 0 {
			return i
		}
	}
}

// next reads what follows a member or an element that ends at b[i]: the
// closing byte (done, i just past it) or a comma (i at what follows it).
func (w *walker) next(i int, closing byte) (int, bool) {
	b := w.b
	if i = jsontext.SpaceEnd(b, i); i >= len(b) {
		return -1, false
	}
	switch b[i] {
	case closing:
		return i + 1, true
	case ',':
		return jsontext.SpaceEnd(b, i+1), false
	}
	return -1, false
}

// str decodes the string at b[j] into dst, through the interner when
// shared, and returns the index just past it, or -1 when the value there
// is not a string (or, strict, not a plain one).
func (w *walker) str(j int, dst *string, shared bool) int {
	b := w.b
	if b[j] != '"' {
		return -1
	}
	if e := plainEnd(b, j); e >= 0 {
		if shared && w.in != nil {
			*dst = w.in.str(b[j+1 : e-1])
		} else {
			*dst = string(b[j+1 : e-1])
		}
		return e
	}
	if w.strict {
		return -1
	}
	e := jsontext.SkipString(b, j)
	s, ok := stringValue(b[j:e])
	if !ok {
		return -1
	}
	*dst = s
	return e
}

// plainEnd returns the index just past the string at b[j] (its opening
// quote) when it holds no escape, no control character and only valid
// UTF-8, as encoding/json takes such a string byte for byte; -1 otherwise.
func plainEnd(b []byte, j int) int {
	for i := jsontext.PlainEnd(b, j+1); i < len(b); {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20 || c == '\\':
			return -1
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return -1
			}
			i += size
		default:
			i++
		}
	}
	return -1
}

// value returns the index just past the value at b[j], one the walker
// keeps raw or hands on, nested in depth objects and arrays of the frame.
// Strict, it gives up when CheckJSON, reaching the value there, would
// refuse it.
func (w *walker) value(j, depth int) int {
	if !w.strict {
		return jsontext.SkipValue(w.b, j)
	}
	e, err := jsontext.ValidateValue(w.b, j, checkDepth-depth)
	if err != nil {
		return -1
	}
	return e
}

// number returns the JSON number at b[j] (nil when there is none) and the
// index just past it: strconv reads it after that, so a '+' or a leading
// zero, which strconv takes, never reaches it.
func (w *walker) number(j int) ([]byte, int) {
	e, ok := jsontext.NumberEnd(w.b, j)
	if !ok {
		return nil, -1
	}
	return w.b[j:e], e
}

// boolean reads the literal true or false at b[j] into dst and returns
// the index just past it, or -1.
func (w *walker) boolean(j int, dst *bool) int {
	switch rest := w.b[j:]; {
	case bytes.HasPrefix(rest, []byte("true")):
		*dst = true
		return j + len("true")
	case bytes.HasPrefix(rest, []byte("false")):
		*dst = false
		return j + len("false")
	}
	return -1
}

// integer reads the number at b[j] as encoding/json reads it into a signed
// integer of bitSize bits.
func (w *walker) integer(j, bitSize int) (int64, int) {
	t, e := w.number(j)
	n, err := strconv.ParseInt(string(t), 10, bitSize)
	if err != nil {
		return 0, -1
	}
	return n, e
}

// unsigned reads the number at b[j] as encoding/json reads it into a
// uint64.
func (w *walker) unsigned(j int) (uint64, int) {
	t, e := w.number(j)
	n, err := strconv.ParseUint(string(t), 10, 64)
	if err != nil {
		return 0, -1
	}
	return n, e
}

// unsigneds decodes the array of unsigned integers at b[i] (an ack's
// sequences).
func (w *walker) unsigneds(i int) ([]uint64, int) {
	out := []uint64{}
	end := w.array(i, func(j int) int {
		n, e := w.unsigned(j)
		out = append(out, n)
		return e
	})
	if end < 0 {
		return nil, end
	}
	return out, end
}

// The frame members the walker decodes, in the order the encoders write
// them.
const (
	fOp = iota
	fID
	fBrief
	fRe
	fSub
	fStatus
	fTimeoutMs
	fAttempt
	fMessage
	fMessages
	fAttempts
	fResults
	fDeliveries
	fMessageID
	fMessageIDs
	fSequence
	fSequences
	fHops
)

var frameNames = names{
	fOp: "op", fID: "id", fBrief: "brief", fRe: "re", fSub: "sub", fStatus: "status", fTimeoutMs: "timeoutMs", fAttempt: "attempt",
	fMessage: "message", fMessages: "messages", fAttempts: "attempts", fResults: "results", fDeliveries: "deliveries",
	fMessageID: "messageId", fMessageIDs: "messageIds", fSequence: "sequence", fSequences: "sequences",
	fHops: "hops",
}

// decodeFrameFast decodes a frame of the publish path, text CheckJSON
// accepted; ok is false when the frame is not one it decodes exactly as
// encoding/json does.
func decodeFrameFast(b []byte, in *interner) (*Frame, bool) {
	w := walker{b: b, in: in}
	return w.frame()
}

// decodeFrameStrict decodes a frame of the publish path as it arrives; ok
// is false unless CheckJSON accepts b and encoding/json decodes it to the
// same frame.
func decodeFrameStrict(b []byte, in *interner) (*Frame, bool) {
	w := walker{b: b, in: in, strict: true}
	return w.frame()
}

func (w *walker) frame() (*Frame, bool) {
	f := new(Frame)
	var messages []byte
	end := w.object(0, frameNames, func(k, j int) int {
		var e int
		switch k {
		case fOp:
			return w.str(j, &f.Op, true)
		case fID:
			return w.str(j, &f.ID, false)
		case fBrief:
			return w.boolean(j, &f.Brief)
		case fRe:
			return w.str(j, &f.Re, false)
		case fSub:
			return w.str(j, &f.Sub, true)
		case fStatus:
			return w.str(j, &f.Status, true)
		case fTimeoutMs:
			f.TimeoutMs, e = w.integer(j, 64)
		case fAttempt:
			var n int64
			n, e = w.integer(j, strconv.IntSize)
			f.Attempt = int(n)
		case fMessage:
			f.Message, e = w.message(j, 1)
		case fMessages:
			// Split now, decoded below once the op is known.
			if w.b[j] != '[' {
				return -1
			}
			e = jsontext.SkipValue(w.b, j)
			messages = w.b[j:e]
		case fAttempts:
			var ns []uint64
			if ns, e = w.unsigneds(j); e >= 0 {
				f.Attempts = make([]int, len(ns))
				for i, n := range ns {
					if n > math.MaxInt32 {
						return -1
					}
					f.Attempts[i] = int(n)
				}
			}
		case fResults:
			f.Results, e = w.answers().results(j)
		case fDeliveries:
			f.Deliveries, f.delivered, e = w.answers().deliveries(j)
		case fMessageID:
			return w.str(j, &f.MessageID, false)
		case fMessageIDs:
			f.MessageIDs, e = w.strings(j)
		case fSequence:
			f.Sequence, e = w.unsigned(j)
		case fSequences:
			f.Sequences, e = w.unsigneds(j)
		case fHops:
			var n uint64
			if n, e = w.unsigned(j); n > math.MaxUint32 {
				return -1 // encoding/json refuses it
			}
			f.Hops = uint32(n)
		}
		return e
	})
	if end < 0 || jsontext.SpaceEnd(w.b, end) != len(w.b) {
		return nil, false
	}
	if messages != nil {
		list := walker{b: messages, in: w.in, strict: w.strict, data: w.data && f.Op == OpPublishBatch, trusted: w.trusted}
		var ok bool
		if f.Op == OpPublishBatch {
			f.Batch, f.decoded, ok = list.batch()
		} else {
			f.Messages, ok = list.messages()
		}
		if !ok {
			return nil, false
		}
	}
	return f, true
}

// answers is w for the messages of the server's answers, which are
// never published: without data.
func (w *walker) answers() *walker {
	a := *w
	a.data, a.pre = false, nil
	return &a
}

// batch splits the array b, the messages of a publish_batch, each to be
// judged, and refused, on its own: an element the walker decodes is in
// decoded (and nil in raw); any other is copied, undecoded, into raw (and
// nil in decoded), for the publish to decode, or refuse, alone.
//
// The messages it decodes are allocated batchChunk at a time: the engine
// judges a copy of each and keeps none of them (only the bytes
// messageInto copies out for each message alone).
func (w *walker) batch() (raw []json.RawMessage, decoded []*pigeon.Message, ok bool) {
	// Room for about as many messages as the text holds of a typical
	// size.
	n := min(1+len(w.b)/batchMessageLen, MaxPublishBatch)
	raw, decoded = make([]json.RawMessage, 0, n), make([]*pigeon.Message, 0, n)
	var chunk []pigeon.Message
	end := w.array(0, func(j int) int {
		if w.b[j] == '{' {
			if len(chunk) == 0 {
				chunk = make([]pigeon.Message, batchChunk)
			}
			if w.data && len(w.pre) == 0 {
				w.pre = make([]predecoded.Data, batchChunk)
			}
			m := &chunk[0]
			if e := w.messageInto(m, j, 2); e >= 0 {
				chunk = chunk[1:]
				raw, decoded = append(raw, nil), append(decoded, m)
				return e
			}
			*m = pigeon.Message{}
		}
		e := w.value(j, 2)
		if e >= 0 {
			raw, decoded = append(raw, append(json.RawMessage(nil), w.b[j:e]...)), append(decoded, nil)
		}
		return e
	})
	return raw, decoded, end >= 0
}

// batchChunk is how many messages of a batch batch allocates at once.
const batchChunk = 16

// batchMessageLen is about the length of a published message, for the
// room batch makes.
const batchMessageLen = 512

// strings decodes the array of strings at b[i] (an ack's message ids).
// When none holds an escape, as the ids the server writes never do, they
// are substrings of one copy of the array's text: an ack of many
// deliveries costs two allocations, not one per id and a growing slice.
func (w *walker) strings(i int) ([]string, int) {
	n, plain := 0, true
	end := w.array(i, func(j int) int {
		n++
		if w.b[j] == '"' {
			if e := plainEnd(w.b, j); e >= 0 {
				return e
			}
		}
		plain = false
		var s string
		return w.str(j, &s, false)
	})
	if end < 0 {
		return nil, end
	}
	out := make([]string, 0, n)
	var text string
	if plain {
		text = string(w.b[i:end])
	}
	w.array(i, func(j int) int {
		if plain {
			e := plainEnd(w.b, j)
			out = append(out, text[j+1-i:e-1-i])
			return e
		}
		var s string
		e := w.str(j, &s, false)
		out = append(out, s)
		return e
	})
	return out, end
}

// messages decodes the array b of envelopes, a frame's "messages".
func (w *walker) messages() ([]*pigeon.Message, bool) {
	out := []*pigeon.Message{}
	end := w.array(0, func(j int) int {
		m, e := w.message(j, 2)
		out = append(out, m)
		return e
	})
	return out, end >= 0
}
