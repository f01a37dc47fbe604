package pigeon

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
)

// SpecVersion is the only envelope version the broker speaks.
const SpecVersion = "1.0"

// Defaults applied to an envelope that leaves the field empty.
const (
	DefaultClassification = "internal"
)

// Message is the CloudEvents-like envelope every message travels in. A
// publisher fills the first group; the broker overwrites Source with the
// authenticated principal and, on acceptance, fills the second group.
// What a publisher writes in the second group is discarded: the broker
// sets each of its fields, Hops included, itself.
//
// Message values are not safe for concurrent mutation; the broker never
// mutates a Message it was given (it works on a copy).
type Message struct {
	SpecVersion    string          `json:"specversion"`
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	Source         string          `json:"source"`
	Subject        string          `json:"subject"`
	Time           string          `json:"time"`
	Intent         string          `json:"intent"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	Classification string          `json:"classification"`
	Region         string          `json:"region"`
	Data           json.RawMessage `json:"data"`
	ReplyTo        string          `json:"replyTo,omitempty"`
	CorrelationID  string          `json:"correlationId,omitempty"`
	Reason         string          `json:"reason,omitempty"`
	Signature      *Signature      `json:"signature,omitempty"`

	Sequence   uint64 `json:"sequence,omitempty"`
	ContractID string `json:"contractId,omitempty"`
	SubjectID  string `json:"subjectId,omitempty"`
	SchemaID   string `json:"schemaId,omitempty"`
	AcceptedAt string `json:"acceptedAt,omitempty"`
	// Hops is how many programs deep the message is (package programs):
	// 0, and absent on the wire, for a message from outside the programs;
	// d+1 for one a program published while it handled a message of hops
	// d. The broker sets it from the publishing Caller's Hops, on every
	// node alike, whatever the publisher wrote; it is not signed.
	Hops uint32 `json:"hops,omitempty"`

	// pre is Data decoded by the WebSocket server's frame decoder or the
	// HTTP server's envelope decoder, or nil (see package
	// internal/predecoded). Publish uses it only while Data is pre.Text,
	// and takes it from the message it is given.
	pre *predecoded.Data
}

func init() {
	predecoded.Attach = func(m any, d *predecoded.Data) { m.(*Message).pre = d }
	predecoded.DecodeMessage = func(b []byte) (any, error) {
		if m := decodeEnvelopeData(b, true); m != nil {
			return m, nil
		}
		m, err := decodeMessageSlow(b)
		if err != nil {
			return nil, err
		}
		return m, nil
	}
}

// Signature is a detached signature over the canonical form of a message.
type Signature struct {
	KID string `json:"kid"`
	Alg string `json:"alg"`
	Sig string `json:"sig"`
	// V names the signing form: SignatureV2, or 0 (absent on the wire)
	// for the first form. See CanonicalSigningInput. A v of 0 or null
	// written out reads as absent, as null does in every envelope field,
	// and the broker stores the signature without it.
	V int `json:"v,omitempty"`
}

// MaxJSONDepth is how deeply a message's data may nest objects and arrays.
// A message or frame read from the network may nest a few levels more, for
// the envelope and the frame around the data.
const MaxJSONDepth = 64

// edgeDepth is the nesting CheckJSON allows: the data's limit plus the
// envelope and frame levels around it, so the engine names the data's
// limit precisely.
const edgeDepth = MaxJSONDepth + 8

// CheckJSON refuses JSON text that readers could decode to different
// values, before anything reads it: DUPLICATE_KEY for an object with two
// members of one name, INVALID_UTF8 for bytes that are not UTF-8 or a lone
// surrogate escape, and BAD_REQUEST for text that is not JSON or nests
// deeper than MaxJSONDepth plus the envelope's levels. Transports call it
// on every message and frame they read; DecodeMessage calls it too. The
// error's message names an offset and a path, never a value.
func CheckJSON(b []byte) error {
	err := jsontext.Validate(b, edgeDepth)
	if err == nil {
		return nil
	}
	return jsonTextError(err, CodeBadRequest)
}

// jsonTextError maps a jsontext refusal to its code; other refusals take
// fallback.
func jsonTextError(err error, fallback Code) *Error {
	var je *jsontext.Error
	if !errors.As(err, &je) {
		return WrapError(fallback, err, "malformed JSON")
	}
	switch je.Kind {
	case jsontext.KindDuplicateKey:
		return WrapError(CodeDuplicateKey, err, "%s", je.Error())
	case jsontext.KindInvalidUTF8:
		return WrapError(CodeInvalidUTF8, err, "%s", je.Error())
	}
	return WrapError(fallback, err, "%s", je.Error())
}

// DecodeMessage decodes one JSON envelope. It fails as CheckJSON does on
// ambiguous text (DUPLICATE_KEY, INVALID_UTF8), and with ENVELOPE_INVALID
// when b is not a JSON object, has a field of the wrong type, or has data
// that is not valid JSON. Missing fields are left empty; the envelope gate
// judges them. The envelopes publishers send are read in one pass without
// reflection (decodeEnvelope); anything else takes the strict path
// through encoding/json, and a differential fuzz test holds the two to the
// same answers.
func DecodeMessage(b []byte) (*Message, error) {
	if m := decodeEnvelope(b); m != nil {
		return m, nil
	}
	return decodeMessageSlow(b)
}

// decodeMessageSlow is DecodeMessage through jsontext.Validate and
// encoding/json: it decides every text the one-pass decoder hands on.
func decodeMessageSlow(b []byte) (*Message, error) {
	// Only JSON's own white space: bytes.TrimSpace would also take
	// Unicode spaces (U+00A0, U+0085, \v, \f), and accept as a message
	// text that is not JSON, which CheckJSON and every other reader refuse.
	b = bytes.Trim(b, jsonSpace)
	if len(b) == 0 || b[0] != '{' {
		return nil, NewError(CodeEnvelopeInvalid, "message must be a JSON object")
	}
	if err := jsontext.Validate(b, edgeDepth); err != nil {
		return nil, jsonTextError(err, CodeEnvelopeInvalid)
	}
	if err := CheckNames(b, (*Message)(nil)); err != nil {
		return nil, err
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, WrapError(CodeEnvelopeInvalid, err, "message is not a valid envelope: %s", jsonErrorText(err))
	}
	return &m, nil
}

// jsonSpace is the white space JSON allows around a value (RFC 8259).
const jsonSpace = " \t\n\r"

var messageType = reflect.TypeFor[Message]()

// CheckNames refuses the JSON text b, which CheckJSON accepted, when
// json.Unmarshal(b, v) would decode a member into a field whose name the
// member's matches only without regard to case ("Data" for "data"), at any
// depth that decodes into a struct; values kept as text (a message's
// data) are not looked into. encoding/json takes such a member for the
// field, and readers that match names exactly (JavaScript, Python, serde)
// do not, so the text has no single meaning. The error is ENVELOPE_INVALID
// when the member is an envelope's (v is a *Message, or the member is
// under a "message" member), BAD_REQUEST otherwise; it says where the
// member is and what it should be, never a value. Transports call it on
// every text they decode with encoding/json.
func CheckNames(b []byte, v any) error {
	t := reflect.TypeOf(v)
	path, field, ok := jsontext.CaseVariant(b, t)
	if !ok {
		return nil
	}
	code := CodeBadRequest
	if t == reflect.PointerTo(messageType) || t == messageType || strings.HasPrefix(path, "/message/") {
		code = CodeEnvelopeInvalid
	}
	return NewError(code, "member %q differs from %q only in case: member names are case-sensitive", path, field)
}

// jsonErrorText describes a decoding error without quoting input values.
func jsonErrorText(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return "malformed JSON at offset " + strconv.FormatInt(e.Offset, 10)
	case *json.UnmarshalTypeError:
		return "field " + strconv.Quote(e.Field) + " must be " + e.Type.String()
	}
	return "malformed JSON"
}

// ValidText reports whether every string field of m is valid UTF-8. The
// stored encoding would replace invalid bytes, so a field that is not
// valid would be stored other than the gates judged it; and a client
// sending m in a WebSocket text frame, which must be UTF-8, refuses it
// first (INVALID_UTF8), as the broker does.
func (m *Message) ValidText() bool {
	strs := [...]string{m.SpecVersion, m.ID, m.Type, m.Source, m.Subject, m.Time, m.Intent,
		m.IdempotencyKey, m.Classification, m.Region, m.ReplyTo, m.CorrelationID, m.Reason,
		m.ContractID, m.SubjectID, m.SchemaID, m.AcceptedAt}
	for _, s := range strs {
		// Envelope fields are nearly always ASCII, which is valid UTF-8.
		if !jsontext.ASCII(s) && !utf8.ValidString(s) {
			return false
		}
	}
	if g := m.Signature; g != nil {
		return utf8.ValidString(g.KID) && utf8.ValidString(g.Alg) && utf8.ValidString(g.Sig)
	}
	return true
}

// Clone returns a deep copy of m.
func (m *Message) Clone() *Message {
	var c Message
	m.cloneTo(&c)
	return &c
}

// cloneTo makes c a deep copy of m.
func (m *Message) cloneTo(c *Message) { m.cloneIn(c, nil, nil) }

// cloneIn makes c a deep copy of m, as cloneTo does, its data in buf when
// it fits (capped at its length, so that an append to it copies) and its
// signature in sig when not nil: room the caller allocated with c.
// Empty data is copied as nil.
func (m *Message) cloneIn(c *Message, buf []byte, sig *Signature) {
	*c = *m
	c.pre = nil
	switch n := len(m.Data); {
	case n == 0:
		c.Data = nil
	case n <= len(buf):
		c.Data = buf[:copy(buf, m.Data):n]
	default:
		c.Data = append(json.RawMessage(nil), m.Data...)
	}
	if m.Signature != nil {
		if sig == nil {
			sig = new(Signature)
		}
		*sig = *m.Signature
		c.Signature = sig
	}
}

// sizeHint is about the length of m's encoding (AppendJSON): its fields
// and its data, and room for the member names; escapes may take more.
func (m *Message) sizeHint() int {
	n := 320 + len(m.Data) + len(m.SpecVersion) + len(m.ID) + len(m.Type) + len(m.Source) + len(m.Subject) +
		len(m.Time) + len(m.Intent) + len(m.IdempotencyKey) + len(m.Classification) + len(m.Region) +
		len(m.ReplyTo) + len(m.CorrelationID) + len(m.Reason) + len(m.ContractID) + len(m.SubjectID) +
		len(m.SchemaID) + len(m.AcceptedAt)
	if s := m.Signature; s != nil {
		n += 48 + len(s.KID) + len(s.Alg) + len(s.Sig)
	}
	return n
}

// AppendJSON appends the JSON encoding of m to b. It is the encoding the
// broker stores, equal in meaning to json.Marshal(m) but without reflection.
func (m *Message) AppendJSON(b []byte) []byte {
	b = append(b, `{"specversion":`...)
	b = jsontext.AppendString(b, m.SpecVersion)
	b = appendField(b, "id", m.ID)
	b = appendField(b, "type", m.Type)
	b = appendField(b, "source", m.Source)
	b = appendField(b, "subject", m.Subject)
	b = appendField(b, "time", m.Time)
	b = appendField(b, "intent", m.Intent)
	if m.IdempotencyKey != "" {
		b = appendField(b, "idempotencyKey", m.IdempotencyKey)
	}
	b = appendField(b, "classification", m.Classification)
	b = appendField(b, "region", m.Region)
	b = append(b, `,"data":`...)
	if len(m.Data) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, m.Data...)
	}
	if m.ReplyTo != "" {
		b = appendField(b, "replyTo", m.ReplyTo)
	}
	if m.CorrelationID != "" {
		b = appendField(b, "correlationId", m.CorrelationID)
	}
	if m.Reason != "" {
		b = appendField(b, "reason", m.Reason)
	}
	if s := m.Signature; s != nil {
		b = appendSignature(b, s)
	}
	if m.Sequence != 0 {
		b = append(b, `,"sequence":`...)
		b = strconv.AppendUint(b, m.Sequence, 10)
	}
	b = appendIDs(b, m)
	if m.AcceptedAt != "" {
		b = appendField(b, "acceptedAt", m.AcceptedAt)
	}
	return appendHops(b, m)
}

// appendSignature appends the "signature" member of AppendJSON.
func appendSignature(b []byte, s *Signature) []byte {
	b = append(b, `,"signature":{"kid":`...)
	b = jsontext.AppendString(b, s.KID)
	b = appendField(b, "alg", s.Alg)
	b = appendField(b, "sig", s.Sig)
	if s.V != 0 {
		b = append(b, `,"v":`...)
		b = strconv.AppendInt(b, int64(s.V), 10)
	}
	return append(b, '}')
}

// appendIDs appends the ids AppendJSON writes after "sequence":
// contractId, subjectId and schemaId, those that are set.
func appendIDs(b []byte, m *Message) []byte {
	if m.ContractID != "" {
		b = appendField(b, "contractId", m.ContractID)
	}
	if m.SubjectID != "" {
		b = appendField(b, "subjectId", m.SubjectID)
	}
	if m.SchemaID != "" {
		b = appendField(b, "schemaId", m.SchemaID)
	}
	return b
}

// appendHops appends what AppendJSON writes last: "hops" when set, and
// the closing brace.
func appendHops(b []byte, m *Message) []byte {
	if m.Hops != 0 {
		b = append(b, `,"hops":`...)
		b = strconv.AppendUint(b, uint64(m.Hops), 10)
	}
	return append(b, '}')
}

// MarshalJSON implements json.Marshaler with AppendJSON.
func (m *Message) MarshalJSON() ([]byte, error) {
	if len(m.Data) > 0 && !json.Valid(m.Data) {
		return nil, NewError(CodeEnvelopeInvalid, "data is not valid JSON")
	}
	return m.AppendJSON(make([]byte, 0, 256+len(m.Data))), nil
}

func appendField(b []byte, name, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return jsontext.AppendString(b, v)
}

type formattedTime struct {
	ms  int64
	str string
}

// lastTime caches the latest rendering: under load many messages share a
// millisecond.
var lastTime atomic.Pointer[formattedTime]

// formatTime renders t as the envelope does (RFC 3339, milliseconds, UTC).
func formatTime(t time.Time) string {
	ms := t.UnixMilli()
	if c := lastTime.Load(); c != nil && c.ms == ms {
		return c.str
	}
	var buf [32]byte
	s := string(appendTime(buf[:0], t))
	lastTime.Store(&formattedTime{ms: ms, str: s})
	return s
}

// timeLayout is the envelope's time format.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendTime appends t in timeLayout, in UTC. It writes the digits itself
// for years 0 to 9999, several times faster than AppendFormat: concurrent
// publishers interleave milliseconds, so formatTime's cache often misses.
func appendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, timeLayout)
	}
	hour, minute, sec := t.Clock()
	milli := t.Nanosecond() / int(time.Millisecond)
	b = append(b, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-')
	b = append2(b, int(month), '-')
	b = append2(b, day, 'T')
	b = append2(b, hour, ':')
	b = append2(b, minute, ':')
	b = append2(b, sec, '.')
	return append(b, byte('0'+milli/100), byte('0'+milli/10%10), byte('0'+milli%10), 'Z')
}

// append2 appends v (0 to 99) as two digits, then sep.
func append2(b []byte, v int, sep byte) []byte {
	return append(b, byte('0'+v/10), byte('0'+v%10), sep)
}
