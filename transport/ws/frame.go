package ws

import (
	"bytes"
	"encoding/json"
	"errors"
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
	OpPublish     = "publish"     // → decision
	OpSubscribe   = "subscribe"   // → subscribed
	OpAck         = "ack"         // → ok
	OpNack        = "nack"        // → ok
	OpUnsubscribe = "unsubscribe" // → ok
	OpRequest     = "request"     // → reply
	OpReplay      = "replay"      // → messages
	OpReceive     = "receive"     // → messages
	OpPing        = "ping"        // → pong
)

// Ops the server sends: answers, and the pushes "deliver" and
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
	OpUnsubscribed = "unsubscribed"
)

// Acknowledgement modes of a subscribe frame's "ack".
const (
	AckExplicit = "explicit" // the default: each delivery is acked or nacked
	AckNone     = "none"     // at-most-once, pubsub only: nothing is answered
)

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

	// publish, request, decision, reply, deliver, messages
	Message  *pigeon.Message   `json:"message,omitempty"`
	Messages []*pigeon.Message `json:"messages,omitempty"`
	Status   string            `json:"status,omitempty"`
	Attempt  int               `json:"attempt,omitempty"`

	// subscribe, receive, replay, ack, nack
	Subject     string          `json:"subject,omitempty"`
	Selector    string          `json:"selector,omitempty"`
	Filter      string          `json:"filter,omitempty"`
	Group       string          `json:"group,omitempty"`
	MaxInFlight int             `json:"maxInFlight,omitempty"`
	Window      int             `json:"window,omitempty"`
	Ack         string          `json:"ack,omitempty"`
	MessageIDs  []string        `json:"messageIds,omitempty"`
	NotPending  []string        `json:"notPending,omitempty"`
	Start       json.RawMessage `json:"start,omitempty"`
	MessageID   string          `json:"messageId,omitempty"`
	DelayMs     *int64          `json:"delayMs,omitempty"`
	TimeoutMs   int64           `json:"timeoutMs,omitempty"`
	Max         int             `json:"max,omitempty"`

	Reason       string `json:"reason,omitempty"`
	FromSequence uint64 `json:"fromSequence,omitempty"`
	ToSequence   uint64 `json:"toSequence,omitempty"`

	Error *wire.Error `json:"error,omitempty"`
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
// one plain string).
func DecodeFrame(b []byte) (*Frame, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be a JSON object")
	}
	if err := pigeon.CheckJSON(b); err != nil {
		switch pigeon.ErrorCode(err) {
		case pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8:
			return frameHead(b), err
		}
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be valid JSON")
	}
	f := new(Frame)
	if err := json.Unmarshal(b, f); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// The envelope decodes in the same pass as the frame; its
			// errors are the envelope's, as pigeon.DecodeMessage says them.
			switch {
			case te.Field == "message":
				return f, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message must be a JSON object")
			case strings.HasPrefix(te.Field, "message."):
				return f, pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message is not a valid envelope: field %q must be %s",
					strings.TrimPrefix(te.Field, "message."), te.Type.String())
			}
			return f, pigeon.NewError(pigeon.CodeBadRequest, "frame field %q has the wrong type", te.Field)
		}
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be valid JSON")
	}
	if f.Op == "" {
		return f, pigeon.NewError(pigeon.CodeBadRequest, `a frame needs an "op"`)
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

// encodeError renders an error frame answering re.
func encodeError(re string, err error) []byte {
	we := wire.Encode(err)
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
