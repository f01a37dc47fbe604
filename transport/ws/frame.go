package ws

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"pigeon"
	"pigeon/internal/jsontext"
	"pigeon/internal/wire"
)

// Ops a client sends. Each is answered by exactly one frame whose "re"
// echoes the client's "id": the answer op named in the comment, or "error".
const (
	OpNegotiate   = "negotiate"   // → contract
	OpRenew       = "renew"       // → contract
	OpPublish     = "publish"     // → decision
	OpSubscribe   = "subscribe"   // → subscribed
	OpAck         = "ack"         // → ok
	OpNack        = "nack"        // → ok
	OpUnsubscribe = "unsubscribe" // → ok
	OpRequest     = "request"     // → reply
	OpReplay      = "replay"      // → messages
	OpReceive     = "receive"     // → messages
	OpPing        = "ping"        // → pong

	OpPublishBatch = "publish_batch" // → decisions
)

// Ops the server sends: answers, and the pushes "deliver", "deliver_batch" and
// "unsubscribed", which carry no "re".
const (
	OpContract     = "contract"
	OpDecision     = "decision"
	OpSubscribed   = "subscribed"
	OpOK           = "ok"
	OpReply        = "reply"
	OpMessages     = "messages"
	OpPong         = "pong"
	OpError        = "error"
	OpDeliver      = "deliver"
	OpDeliverBatch = "deliver_batch" // several deliveries of one subscription
	OpUnsubscribed = "unsubscribed"
	OpDecisions    = "decisions"
)

// DeliveryEntry is one delivery of a deliver_batch frame.
type DeliveryEntry struct {
	Attempt int             `json:"attempt"`
	Message *pigeon.Message `json:"message"`
}

// Acknowledgement modes of a subscribe frame's "ack".
const (
	AckExplicit = "explicit" // the default: each delivery is acked or nacked
	AckNone     = "none"     // at-most-once, pubsub only: nothing is answered
)

// MaxFrameID bounds the "id" of a client frame, in bytes: every answer
// echoes it. A frame with a longer one is refused BAD_REQUEST without an
// "re", before it is worked on.
const MaxFrameID = 256

// Subprotocol is the WebSocket subprotocol of this protocol.
const Subprotocol = "pigeon.v1"

// BearerSubprotocolPrefix prefixes a credential carried as a subprotocol,
// for clients (browsers) that cannot set the Authorization header.
const BearerSubprotocolPrefix = "pigeon.bearer."

// Frame is one protocol frame in either direction. Frames are JSON text;
// which fields a frame carries depends on its op (see docs/protocol.md).
// Unknown fields are ignored, so that either side may add fields.
type Frame struct {
	Op  string `json:"op"`
	ID  string `json:"id,omitempty"`
	Re  string `json:"re,omitempty"`
	Sub string `json:"sub,omitempty"`

	// negotiate, contract
	Subjects []string        `json:"subjects,omitempty"`
	TTLMs    int64           `json:"ttlMs,omitempty"`
	Contract json.RawMessage `json:"contract,omitempty"`
	MaxFrame int64           `json:"maxFrame,omitempty"` // contract: the largest frame the server reads

	// publish, publish_batch: answer accepted messages without their data
	Brief bool `json:"brief,omitempty"`
	// publish, publish_batch, request: the depth (pigeon.Message.Hops) to
	// publish the messages at; 0, or absent, is a client's. Only a
	// principal holding pigeon.RoleBridge may ask for another (FORBIDDEN
	// otherwise).
	Hops uint32 `json:"hops,omitempty"`

	// publish, request, decision, reply, deliver, messages
	Message  *pigeon.Message   `json:"message,omitempty"`
	Messages []*pigeon.Message `json:"messages,omitempty"`
	Status   string            `json:"status,omitempty"`
	Attempt  int               `json:"attempt,omitempty"`
	// messages answering receive: in step with Messages, the attempt of
	// each one's lease (0: not leased, a pubsub subject), for the
	// "attempt" of its ack or nack. See Engine.ReceiveAttempts.
	Attempts []int `json:"attempts,omitempty"`

	// subscribe, receive, replay, ack, nack
	Subject     string   `json:"subject,omitempty"`
	Selector    string   `json:"selector,omitempty"`
	Filter      string   `json:"filter,omitempty"`
	Group       string   `json:"group,omitempty"`
	MaxInFlight int      `json:"maxInFlight,omitempty"`
	Window      int      `json:"window,omitempty"`
	Ack         string   `json:"ack,omitempty"`
	MessageIDs  []string `json:"messageIds,omitempty"`
	NotPending  []string `json:"notPending,omitempty"`
	// ok of an ack or nack: in step with NotPending, the sequence each
	// answer not taken named (0: none); present when one named any.
	NotPendingSequences []uint64 `json:"notPendingSequences,omitempty"`
	// ack, nack: the sequence each delivery answered was handed over at
	// (its message's "sequence"), for messageId and, in step, for
	// messageIds; 0 names none. See settleSub.
	Sequence  uint64   `json:"sequence,omitempty"`
	Sequences []uint64 `json:"sequences,omitempty"`
	// subscribe: the client takes deliver_batch frames
	BatchDeliveries bool `json:"batch,omitempty"`
	// subscribed: the first sequence a pubsub subscription delivers
	From uint64 `json:"from,omitempty"`
	// deliver_batch
	Deliveries []DeliveryEntry `json:"deliveries,omitempty"`
	// delivered: the Delivery for each entry's handler, allocated with
	// its message by the frame decoder's fast path (nil otherwise).
	delivered []*pigeon.Delivery
	Start     json.RawMessage `json:"start,omitempty"`
	MessageID string          `json:"messageId,omitempty"`
	DelayMs   *int64          `json:"delayMs,omitempty"`
	TimeoutMs int64           `json:"timeoutMs,omitempty"`
	Max       int             `json:"max,omitempty"`

	Reason       string `json:"reason,omitempty"`
	FromSequence uint64 `json:"fromSequence,omitempty"`
	ToSequence   uint64 `json:"toSequence,omitempty"`

	Error *wire.Error `json:"error,omitempty"`

	// publish_batch: its messages, read from "messages", each to be
	// decoded and judged on its own: Batch holds the text of those the
	// frame decoder left undecoded, decoded the others (the two are as
	// long as the batch, one of them nil at each index). deliver_batch,
	// messages and decisions, on the client's side: the text of each
	// entry the client's reader left out (decodeFromServer), nil at the
	// others; nil when none was. deliver, on the client's side: the text
	// of its message, its one entry, when the reader left it out.
	Batch   []json.RawMessage `json:"-"`
	decoded []*pigeon.Message
	// decisions: one result per message of the batch, in order.
	Results []BatchResult `json:"results,omitempty"`

	admitted int // messages of Batch within the connection's publish rate
	size     int // the frame's bytes, as the server's reader read them
}

// BatchResult is one slot of a decisions answer: the status and the
// message admitted, as a decision answer carries them, or the error that
// refused that message alone.
type BatchResult struct {
	Status  string          `json:"status,omitempty"`
	Message *pigeon.Message `json:"message,omitempty"`
	Error   *wire.Error     `json:"error,omitempty"`

	// result is the Result the publish is resolved with, allocated with
	// Message by the frame decoder's fast path (nil otherwise).
	result *pigeon.Result
}

// DecodeFrame decodes one frame, its envelope included, in one pass. It
// fails with BAD_REQUEST when b is not a JSON object, has a field of the
// wrong type, or has no op, and with ENVELOPE_INVALID when only its
// "message" is malformed. Text that readers could take differently is
// refused first, as pigeon.CheckJSON says: DUPLICATE_KEY for an object with
// two members of one name, INVALID_UTF8 for bytes that are not UTF-8 or a
// lone surrogate escape. When the frame decoded far enough to have an id,
// the returned frame is not nil even on error, so the answer can echo it
// (an ambiguous frame gives only its "id" and "re", and only when each is
// one plain string). The messages of a publish_batch are split into Batch
// but not decoded: each is judged on its own. The frames of the publish
// path decode without reflection.
func DecodeFrame(b []byte) (*Frame, error) { return decodeFrame(b, nil) }

// decodeFrame is DecodeFrame sharing repeated strings through in (nil:
// none), for a connection's reader. The frames of the publish path cost
// one pass (decodeFrameStrict); the rest, and every frame it refuses, are
// checked with CheckJSON first (decodeFrameChecked).
func decodeFrame(b []byte, in *interner) (*Frame, error) { return decodeFrameAs(b, walker{in: in}) }

// decodeServerFrame is decodeFrame for the server's reader: the strict
// pass decodes the data of each message it takes for the engine as it
// checks it (predecoded), so a published message's data is read once.
func decodeServerFrame(b []byte, in *interner) (*Frame, error) {
	return decodeFrameAs(b, walker{in: in, data: true})
}

// decodeClientFrame is decodeFrame for the client's reader, which reads
// the server's frames: the strict pass takes the data of each message as
// the server sent it, data the server's decoder accepted, without
// checking it again (walker.trusted). A frame it refuses is checked whole
// (CheckJSON), as any.
func decodeClientFrame(b []byte, in *interner) (*Frame, error) {
	return decodeFrameAs(b, walker{in: in, trusted: true})
}

// decodeFrameAs decodes b with a strict walker of mode's kind (its in,
// data and trusted), else the long way.
func decodeFrameAs(b []byte, mode walker) (*Frame, error) {
	b = bytes.Trim(b, " \t\r\n") // JSON's white space: any other is not JSON
	if len(b) == 0 || b[0] != '{' {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be a JSON object")
	}
	mode.b, mode.strict = b, true
	if f, ok := mode.frame(); ok {
		return withOp(f)
	}
	return decodeFrameChecked(b, mode.in)
}

// decodeFrameChecked decodes the frame b, a JSON object, in two passes:
// CheckJSON, then the fast path or encoding/json on the text it accepted.
func decodeFrameChecked(b []byte, in *interner) (*Frame, error) {
	if err := pigeon.CheckJSON(b); err != nil {
		switch pigeon.ErrorCode(err) {
		case pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8:
			return frameHead(b), err
		}
		if jsontext.Depth(b) > pigeon.MaxJSONDepth {
			// JSON too deep to read here is still answered, when its id
			// can be found: unanswered, its call would wait for its
			// deadline.
			return frameHead(b), pigeon.NewError(pigeon.CodeBadRequest, "a frame may nest at most %d levels (data %d)", pigeon.MaxJSONDepth+8, pigeon.MaxJSONDepth)
		}
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be valid JSON")
	}
	f, ok := decodeFrameFast(b, in)
	if !ok {
		var err error
		if f, err = decodeFrameJSON(b); err != nil {
			return f, err
		}
	}
	return withOp(f)
}

// withOp returns f, with an error when it has no op.
func withOp(f *Frame) (*Frame, error) {
	if f.Op == "" {
		return f, pigeon.NewError(pigeon.CodeBadRequest, `a frame needs an "op"`)
	}
	return f, nil
}

// decodeFrameJSON decodes a frame with encoding/json: the frames the fast
// path leaves (see codec.go).
func decodeFrameJSON(b []byte) (*Frame, error) {
	f := new(Frame)
	aux := struct {
		*Frame
		Messages json.RawMessage `json:"messages"`
	}{Frame: f}
	if err := pigeon.CheckNames(b, &aux); err != nil {
		return frameHead(b), err
	}
	if err := json.Unmarshal(b, &aux); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := strings.TrimPrefix(te.Field, "Frame.") // the embedded frame's fields
			// The envelope decodes in the same pass as the frame; its
			// errors are the envelope's, as pigeon.DecodeMessage says them.
			switch {
			case field == "message":
				return f, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message must be a JSON object")
			case strings.HasPrefix(field, "message."):
				return f, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message is not a valid envelope: field %q must be %s",
					strings.TrimPrefix(field, "message."), te.Type.String())
			}
			return f, pigeon.NewError(pigeon.CodeBadRequest, "frame field %q has the wrong type", field)
		}
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be valid JSON")
	}
	if len(aux.Messages) == 0 || string(aux.Messages) == "null" {
		return f, nil
	}
	if f.Op == OpPublishBatch {
		if aux.Messages[0] != '[' {
			return f, pigeon.NewError(pigeon.CodeBadRequest, `frame field "messages" has the wrong type`)
		}
		list := walker{b: aux.Messages}
		f.Batch, f.decoded, _ = list.batch()
		return f, nil
	}
	if err := json.Unmarshal(aux.Messages, &f.Messages); err != nil {
		return f, pigeon.NewError(pigeon.CodeBadRequest, `frame field "messages" has the wrong type`)
	}
	return f, nil
}

// frameHead returns the "id" and "re" of a frame that CheckJSON refused
// but that is JSON all the same, each only when the object has exactly one
// member of that name and its value is a string CheckJSON accepts; nil
// when it has neither.
func frameHead(b []byte) *Frame {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var (
		raw   [2]json.RawMessage // id, re
		count [2]int
	)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		for i, name := range [2]string{"id", "re"} {
			if t == name {
				raw[i] = v
				count[i]++
			}
		}
	}
	var out [2]string
	for i := range out {
		if count[i] == 1 && pigeon.CheckJSON(raw[i]) == nil {
			_ = json.Unmarshal(raw[i], &out[i])
		}
	}
	if out[0] == "" && out[1] == "" {
		return nil
	}
	return &Frame{ID: out[0], Re: out[1]}
}

// appendHead starts a frame: {"op":OP and, when re is not empty, ,"re":RE.
func appendHead(b []byte, op, re string) []byte {
	b = append(b, `{"op":`...)
	b = jsontext.AppendString(b, op)
	if re != "" {
		b = append(b, `,"re":`...)
		b = jsontext.AppendString(b, re)
	}
	return b
}

// appendMessages appends ,"messages":[…]} closing the frame.
func appendMessages(b []byte, msgs []*pigeon.Message) []byte {
	b = append(b, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.AppendJSON(b)
	}
	return append(b, "]}"...)
}

// appendPulled appends ,"messages":[…],"attempts":[…]} closing a
// receive's answer; "attempts" is left out when no message is leased.
func appendPulled(b []byte, msgs []*pigeon.Message, attempts []int) []byte {
	b = appendMessages(b, msgs)
	if !slices.ContainsFunc(attempts, func(n int) bool { return n != 0 }) {
		return b
	}
	b = append(b[:len(b)-1], `,"attempts":[`...)
	for i, n := range attempts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(n), 10)
	}
	return append(b, "]}"...)
}

// encodeError renders an error frame answering re, with what the client
// may be told of err (wire.Public).
func encodeError(re string, err error) []byte {
	we := wire.Encode(wire.Public(err))
	body, mErr := json.Marshal(we)
	if mErr != nil {
		body = []byte(`{"code":"INTERNAL","message":"internal error","details":{}}`)
	}
	b := appendHead(make([]byte, 0, 64+len(body)), OpError, re)
	b = append(b, `,"error":`...)
	b = append(b, body...)
	return append(b, '}')
}

// encodeSimple renders a frame with only op and re.
func encodeSimple(op, re string) []byte {
	return append(appendHead(make([]byte, 0, 32+len(re)), op, re), '}')
}

// appendDeliverHead starts a deliver push, up to its "message":.
func appendDeliverHead(b []byte, sub string, attempt int) []byte {
	b = appendHead(b, OpDeliver, "")
	b = append(b, `,"sub":`...)
	b = jsontext.AppendString(b, sub)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(attempt), 10)
	return append(b, `,"message":`...)
}

// encodeDeliver renders a deliver push.
func encodeDeliver(b []byte, sub string, m *pigeon.Message, attempt int) []byte {
	return append(m.AppendJSON(appendDeliverHead(b, sub, attempt)), '}')
}
