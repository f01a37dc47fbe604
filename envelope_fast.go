package pigeon

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"pigeon/internal/jsontext"
	"pigeon/internal/predecoded"
)

// Fields of the envelope that hold a string, indexes into fieldNames.
const (
	fSpecVersion = iota
	fID
	fType
	fSource
	fSubject
	fTime
	fIntent
	fIdempotencyKey
	fClassification
	fRegion
	fReplyTo
	fCorrelationID
	fReason
	fContractID
	fSubjectID
	fSchemaID
	fAcceptedAt
	nStringFields
)

// Members of the envelope that are not strings.
const (
	fData = nStringFields + iota
	fSignature
	fSequence
	fHops
	nFields
)

// fieldNames are the envelope's member names, as Message tags them.
var fieldNames = [nFields]string{
	fSpecVersion: "specversion", fID: "id", fType: "type", fSource: "source", fSubject: "subject", fTime: "time",
	fIntent: "intent", fIdempotencyKey: "idempotencyKey", fClassification: "classification", fRegion: "region",
	fReplyTo: "replyTo", fCorrelationID: "correlationId", fReason: "reason", fContractID: "contractId",
	fSubjectID: "subjectId", fSchemaID: "schemaId", fAcceptedAt: "acceptedAt",
	fData: "data", fSignature: "signature", fSequence: "sequence", fHops: "hops",
}

// field is the envelope member named exactly name, or -1.
func field(name []byte) int {
	switch string(name) {
	case "specversion":
		return fSpecVersion
	case "id":
		return fID
	case "type":
		return fType
	case "source":
		return fSource
	case "subject":
		return fSubject
	case "time":
		return fTime
	case "intent":
		return fIntent
	case "idempotencyKey":
		return fIdempotencyKey
	case "classification":
		return fClassification
	case "region":
		return fRegion
	case "replyTo":
		return fReplyTo
	case "correlationId":
		return fCorrelationID
	case "reason":
		return fReason
	case "contractId":
		return fContractID
	case "subjectId":
		return fSubjectID
	case "schemaId":
		return fSchemaID
	case "acceptedAt":
		return fAcceptedAt
	case "data":
		return fData
	case "signature":
		return fSignature
	case "sequence":
		return fSequence
	case "hops":
		return fHops
	}
	return -1
}

// foldsToField reports whether name matches a member of the envelope when
// case is ignored, as encoding/json matches names.
func foldsToField(name []byte) bool {
	for _, f := range fieldNames {
		if strings.EqualFold(string(name), f) {
			return true
		}
	}
	return false
}

// maxUnknown is how many members the envelope does not define decodeEnvelope
// keeps track of (to refuse a repeated one); an envelope with more is handed
// on.
const maxUnknown = 8

// span is a string field's text, in[start:end] of its envelopeDecoder.
type span struct{ start, end int }

type envelopeDecoder struct {
	in      []byte
	i       int
	seen    uint32
	spans   [nStringFields + 3]span // the string fields, then kid, alg, sig
	unknown [maxUnknown][]byte
	nUnk    int
	sigV    int // the signature's v: SignatureV2 when present
	// predecode asks data to decode the data too, into pre.
	predecode bool
	pre       *predecoded.Data
}

// Spans of the signature's members, after the string fields.
const (
	sKID = nStringFields + iota
	sAlg
	sSig
)

// decodeEnvelope decodes b when it is an envelope that encoding/json reads
// exactly as decoded here and that decodeMessageSlow accepts; otherwise
// it returns nil and decides nothing.
func decodeEnvelope(b []byte) *Message { return decodeEnvelopeData(b, false) }

// decodeEnvelopeData is decodeEnvelope that, when predecode is set, also
// decodes the data as the engine would (in the flat form,
// jsontext.DecodeFlat, in the same pass that checks it) and attaches it
// to the message (internal/predecoded), whose Data is then the decoder's
// copy. Which texts it reads, and the message it makes of them, do not
// depend on predecode.
func decodeEnvelopeData(b []byte, predecode bool) *Message {
	d := envelopeDecoder{in: b, predecode: predecode}
	d.ws()
	if d.i >= len(d.in) || d.in[d.i] != '{' {
		return nil
	}
	d.i++
	var (
		data      []byte
		signature bool
		sequence  uint64
		hops      uint32
	)
	d.ws()
	if d.i < len(d.in) && d.in[d.i] == '}' {
		d.i++
	} else {
		for {
			name, ok := d.name()
			if !ok {
				return nil
			}
			f := field(name)
			if f < 0 {
				if !d.skipUnknown(name) {
					return nil
				}
			} else {
				if d.seen&(1<<f) != 0 {
					return nil // a repeated member: DUPLICATE_KEY
				}
				d.seen |= 1 << f
				switch {
				case f < nStringFields:
					if !d.str(f) {
						return nil
					}
				case f == fData:
					if data = d.data(); data == nil {
						return nil
					}
				case f == fSignature:
					if signature, ok = d.signature(); !ok {
						return nil
					}
				case f == fSequence:
					if sequence, ok = d.unsigned(64); !ok {
						return nil
					}
				case f == fHops:
					var n uint64
					if n, ok = d.unsigned(32); !ok {
						return nil
					}
					hops = uint32(n)
				}
			}
			d.ws()
			if d.i >= len(d.in) {
				return nil
			}
			c := d.in[d.i]
			d.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return nil
			}
		}
	}
	d.ws()
	if d.i != len(d.in) {
		return nil
	}
	// One allocation holds every string field.
	n := 0
	for _, s := range d.spans {
		n += s.end - s.start
	}
	var sb strings.Builder
	sb.Grow(n)
	for i, s := range d.spans {
		sb.Write(d.in[s.start:s.end])
		d.spans[i] = span{sb.Len() - (s.end - s.start), sb.Len()}
	}
	text := sb.String()
	at := func(s span) string { return text[s.start:s.end] }
	m := &Message{
		SpecVersion: at(d.spans[fSpecVersion]), ID: at(d.spans[fID]), Type: at(d.spans[fType]), Source: at(d.spans[fSource]),
		Subject: at(d.spans[fSubject]), Time: at(d.spans[fTime]), Intent: at(d.spans[fIntent]),
		IdempotencyKey: at(d.spans[fIdempotencyKey]), Classification: at(d.spans[fClassification]), Region: at(d.spans[fRegion]),
		Data: data, ReplyTo: at(d.spans[fReplyTo]), CorrelationID: at(d.spans[fCorrelationID]), Reason: at(d.spans[fReason]),
		Sequence: sequence, ContractID: at(d.spans[fContractID]), SubjectID: at(d.spans[fSubjectID]),
		SchemaID: at(d.spans[fSchemaID]), AcceptedAt: at(d.spans[fAcceptedAt]), Hops: hops,
	}
	if signature {
		m.Signature = &Signature{KID: at(d.spans[sKID]), Alg: at(d.spans[sAlg]), Sig: at(d.spans[sSig]), V: d.sigV}
	}
	m.pre = d.pre
	return m
}

func (d *envelopeDecoder) ws() {
	for d.i < len(d.in) {
		switch d.in[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// name reads a member name and its colon. Only plain ASCII names without
// escapes are read here; encoding/json matches a name in another case, so
// one that folds to a name of the envelope is handed on too.
func (d *envelopeDecoder) name() ([]byte, bool) {
	d.ws()
	if d.i >= len(d.in) || d.in[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	end := start
	for ; end < len(d.in); end++ {
		c := d.in[end]
		if c == '"' {
			break
		}
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	if end >= len(d.in) {
		return nil, false
	}
	d.i = end + 1
	d.ws()
	if d.i >= len(d.in) || d.in[d.i] != ':' {
		return nil, false
	}
	d.i++
	d.ws()
	return d.in[start:end], true
}

// skipUnknown checks the value of a member the envelope does not define,
// as the single validation pass does for data, and drops it (as
// encoding/json does). A repeated name is refused by handing on.
func (d *envelopeDecoder) skipUnknown(name []byte) bool {
	if d.nUnk == maxUnknown || foldsToField(name) {
		return false
	}
	for _, u := range d.unknown[:d.nUnk] {
		if string(u) == string(name) {
			return false
		}
	}
	d.unknown[d.nUnk] = name
	d.nUnk++
	return d.value() != nil
}

// str reads the string value of field f (or null, which leaves it empty,
// as encoding/json leaves a string). A string with an escape is handed on.
func (d *envelopeDecoder) str(f int) bool {
	if d.literal("null") {
		return true
	}
	if d.i >= len(d.in) || d.in[d.i] != '"' {
		return false
	}
	start := d.i + 1
	for j := start; j < len(d.in); {
		c := d.in[j]
		switch {
		case c == '"':
			d.spans[f] = span{start, j}
			d.i = j + 1
			return true
		case c < 0x20 || c == '\\':
			return false
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d.in[j:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			j += size
		default:
			j++
		}
	}
	return false
}

// literal consumes word when the input holds it next.
func (d *envelopeDecoder) literal(word string) bool {
	if len(d.in)-d.i >= len(word) && string(d.in[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return true
	}
	return false
}

// value validates the JSON value at d.i (syntax, UTF-8, repeated names,
// nesting within the envelope's limit) and returns its text.
func (d *envelopeDecoder) value() []byte {
	end := jsontext.SkipValue(d.in, d.i)
	if jsontext.Validate(d.in[d.i:end], edgeDepth-1) != nil {
		return nil
	}
	v := d.in[d.i:end]
	d.i = end
	return v
}

// data reads the data member: any valid JSON value but null (which
// encoding/json would keep as the text "null"; handed on), copied.
func (d *envelopeDecoder) data() []byte {
	if d.i < len(d.in) && d.in[d.i] == 'n' {
		return nil
	}
	if d.predecode {
		// The decoder (jsontext.DecodeFlat) checks what value does (a
		// text it decodes, within the engine's nesting limit, value
		// accepts) and copies it; one it refuses (too deep for the
		// engine, or not JSON) is read below as ever, the engine decoding
		// it again.
		if end := jsontext.SkipValue(d.in, d.i); end > d.i {
			if p := new(predecoded.Data); p.Decode(d.in[d.i:end], MaxJSONDepth) {
				d.pre, d.i = p, end
				return p.Text[:len(p.Text):len(p.Text)]
			}
		}
	}
	v := d.value()
	if v == nil {
		return nil
	}
	return append(make([]byte, 0, len(v)), v...)
}

// signature reads the signature member: null, or an object of the string
// members kid, alg and sig and the number v, each at most once; a v other
// than the literal 2 is handed on.
func (d *envelopeDecoder) signature() (present, ok bool) {
	if d.literal("null") {
		return false, true
	}
	if d.i >= len(d.in) || d.in[d.i] != '{' {
		return false, false
	}
	d.i++
	d.ws()
	if d.i < len(d.in) && d.in[d.i] == '}' {
		d.i++
		return true, true
	}
	var seen uint8
	for {
		name, ok := d.name()
		if !ok {
			return false, false
		}
		s := -1
		switch string(name) {
		case "v":
		case "kid":
			s = sKID
		case "alg":
			s = sAlg
		case "sig":
			s = sSig
		default:
			return false, false
		}
		if s < 0 {
			if d.sigV != 0 || !d.literal("2") {
				return false, false
			}
			d.sigV = SignatureV2
		} else {
			if seen&(1<<(s-sKID)) != 0 {
				return false, false
			}
			seen |= 1 << (s - sKID)
			if !d.str(s) {
				return false, false
			}
		}
		d.ws()
		if d.i >= len(d.in) {
			return false, false
		}
		c := d.in[d.i]
		d.i++
		if c == '}' {
			return true, true
		}
		if c != ',' {
			return false, false
		}
	}
}

// unsigned reads the value of the sequence or hops member: null, or an
// integer that fits bits unsigned bits, written without a sign, fraction
// or exponent (as encoding/json reads it into a uint64 or uint32).
func (d *envelopeDecoder) unsigned(bits int) (uint64, bool) {
	if d.literal("null") {
		return 0, true
	}
	end, ok := jsontext.NumberEnd(d.in, d.i)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.in[d.i:end]), 10, bits)
	if err != nil {
		return 0, false
	}
	d.i = end
	return n, true
}
