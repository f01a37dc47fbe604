package ws

import (
	"bytes"
	"encoding/json"
	"strconv"

	"pigeon"
	"pigeon/internal/wire"
)

// The frame codec's fast path: the frames of the publish path (publish,
// publish_batch, request, and the decision, decisions, reply, deliver and
// messages answers) decode without reflection. It reads only text that
// pigeon.CheckJSON has accepted (valid JSON, UTF-8, no duplicate names),
// and it gives up (ok false) on anything it does not know exactly: a name
// it does not know or spelled in another case, a null, a number that is
// not a plain unsigned integer, an escaped name. DecodeFrame then decodes
// the frame with encoding/json, so the two paths never answer differently
// (FuzzDecodeFrameFast checks that they agree).

// spaceEnd returns the index of the first byte at or after i that is not
// JSON white space.
func spaceEnd(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd returns the index just past the string that starts at b[i]:
// past the first quote after it that an odd run of backslashes does not
// escape.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b)
		}
		i += q
		k := i - 1
		for b[k] == '\\' {
			k--
		}
		if (i-1-k)%2 == 0 {
			return i + 1
		}
		i++
	}
	return len(b)
}

// valueEnd returns the index just past the JSON value that starts at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// eachMember calls fn with the name (as written, quotes off) and the value
// of each member of the object b, stopping when fn returns false; it
// reports whether it went through them all.
func eachMember(b []byte, fn func(name, v []byte) bool) bool {
	i := spaceEnd(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = spaceEnd(b, i+1)
	for i < len(b) && b[i] == '"' {
		ne := stringEnd(b, i)
		name := b[i+1 : ne-1]
		i = spaceEnd(b, ne)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = spaceEnd(b, i+1)
		if i >= len(b) {
			return false
		}
		ve := valueEnd(b, i)
		if !fn(name, b[i:ve]) {
			return false
		}
		i = spaceEnd(b, ve)
		if i < len(b) && b[i] == ',' {
			i = spaceEnd(b, i+1)
		}
	}
	return true
}

// eachElement calls fn with each element of the array b, stopping when fn
// returns false; it reports whether b is an array and fn took every
// element.
func eachElement(b []byte, fn func(v []byte) bool) bool {
	i := spaceEnd(b, 0)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	i = spaceEnd(b, i+1)
	for i < len(b) && b[i] != ']' {
		ve := valueEnd(b, i)
		if !fn(b[i:ve]) {
			return false
		}
		i = spaceEnd(b, ve)
		if i < len(b) && b[i] == ',' {
			i = spaceEnd(b, i+1)
		}
	}
	return true
}

// stringValue decodes the JSON string v.
func stringValue(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// plainName reports whether a member name has no escape, so that it reads
// as written.
func plainName(name []byte) bool { return bytes.IndexByte(name, '\\') < 0 }

// decodeMessageFast decodes the envelope v as encoding/json would decode
// it into a pigeon.Message; ok is false when it cannot say so for sure.
func decodeMessageFast(v []byte) (*pigeon.Message, bool) {
	if len(v) == 0 || v[0] != '{' {
		return nil, false
	}
	m := new(pigeon.Message)
	ok := eachMember(v, func(name, v []byte) bool {
		if !plainName(name) {
			return false
		}
		var dst *string
		switch string(name) {
		case "specversion":
			dst = &m.SpecVersion
		case "id":
			dst = &m.ID
		case "type":
			dst = &m.Type
		case "source":
			dst = &m.Source
		case "subject":
			dst = &m.Subject
		case "time":
			dst = &m.Time
		case "intent":
			dst = &m.Intent
		case "idempotencyKey":
			dst = &m.IdempotencyKey
		case "classification":
			dst = &m.Classification
		case "region":
			dst = &m.Region
		case "replyTo":
			dst = &m.ReplyTo
		case "correlationId":
			dst = &m.CorrelationID
		case "reason":
			dst = &m.Reason
		case "contractId":
			dst = &m.ContractID
		case "subjectId":
			dst = &m.SubjectID
		case "schemaId":
			dst = &m.SchemaID
		case "acceptedAt":
			dst = &m.AcceptedAt
		case "data":
			if string(v) == "null" {
				return false
			}
			m.Data = append(json.RawMessage(nil), v...)
			return true
		case "sequence":
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil || v[0] == '0' && len(v) > 1 {
				return false
			}
			m.Sequence = n
			return true
		case "signature":
			sig, ok := decodeSignatureFast(v)
			m.Signature = sig
			return ok
		default:
			return false
		}
		s, ok := stringValue(v)
		*dst = s
		return ok
	})
	if !ok {
		return nil, false
	}
	return m, true
}

func decodeSignatureFast(v []byte) (*pigeon.Signature, bool) {
	if v[0] != '{' {
		return nil, false
	}
	sig := new(pigeon.Signature)
	ok := eachMember(v, func(name, v []byte) bool {
		var dst *string
		switch string(name) {
		case "kid":
			dst = &sig.KID
		case "alg":
			dst = &sig.Alg
		case "sig":
			dst = &sig.Sig
		default:
			return false
		}
		s, ok := stringValue(v)
		*dst = s
		return ok
	})
	return sig, ok
}

// decodeFrameFast decodes a frame of the publish path; ok is false when
// the frame is not one it decodes exactly as encoding/json does.
func decodeFrameFast(b []byte) (f *Frame, ok bool) {
	f = new(Frame)
	var messages, results []byte
	ok = eachMember(b, func(name, v []byte) bool {
		var dst *string
		switch string(name) {
		case "op":
			dst = &f.Op
		case "id":
			dst = &f.ID
		case "re":
			dst = &f.Re
		case "sub":
			dst = &f.Sub
		case "status":
			dst = &f.Status
		case "message":
			m, ok := decodeMessageFast(v)
			f.Message = m
			return ok
		case "messages":
			messages = v
			return v[0] == '['
		case "results":
			results = v
			return v[0] == '['
		case "attempt", "timeoutMs":
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || (len(v) > 1 && v[0] == '0') || (string(name) == "attempt" && int64(int(n)) != n) {
				return false
			}
			if name[0] == 'a' {
				f.Attempt = int(n)
			} else {
				f.TimeoutMs = n
			}
			return true
		default:
			return false
		}
		s, ok := stringValue(v)
		*dst = s
		return ok
	})
	if !ok {
		return nil, false
	}
	if messages != nil {
		if f.Op == OpPublishBatch {
			f.Batch = splitBatch(messages)
		} else if f.Messages, ok = decodeMessagesFast(messages); !ok {
			return nil, false
		}
	}
	if results != nil {
		if f.Results, ok = decodeResultsFast(results); !ok {
			return nil, false
		}
	}
	return f, true
}

// splitBatch copies the elements of the array v, undecoded: each message
// of a batch is decoded, and refused, on its own.
func splitBatch(v []byte) []json.RawMessage {
	own := append([]byte(nil), v...)
	var out []json.RawMessage
	eachElement(own, func(v []byte) bool {
		out = append(out, v[:len(v):len(v)])
		return true
	})
	if out == nil {
		out = []json.RawMessage{}
	}
	return out
}

func decodeMessagesFast(v []byte) ([]*pigeon.Message, bool) {
	out := []*pigeon.Message{}
	ok := eachElement(v, func(v []byte) bool {
		m, ok := decodeMessageFast(v)
		out = append(out, m)
		return ok
	})
	return out, ok
}

func decodeResultsFast(v []byte) ([]BatchResult, bool) {
	out := []BatchResult{}
	ok := eachElement(v, func(v []byte) bool {
		var r BatchResult
		ok := eachMember(v, func(name, v []byte) bool {
			switch string(name) {
			case "status":
				s, ok := stringValue(v)
				r.Status = s
				return ok
			case "message":
				m, ok := decodeMessageFast(v)
				r.Message = m
				return ok
			case "error":
				if v[0] != '{' {
					return false
				}
				r.Error = new(wire.Error)
				return json.Unmarshal(v, r.Error) == nil
			}
			return false
		})
		out = append(out, r)
		return ok
	})
	return out, ok
}
