package ws

import (
	"bytes"
	"encoding/json"
	"strconv"

	"pigeon"
	"pigeon/internal/jsontext"
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

// walkObject walks the object that starts at b[i] (after white space):
// for each member fn gets the name (as written, quotes off) and the index
// of its value, and returns the index just past the value, or -1 to give
// up. walkObject returns the index just past the object, or -1.
func walkObject(b []byte, i int, fn func(name []byte, j int) int) int {
	i = jsontext.SpaceEnd(b, i)
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = jsontext.SpaceEnd(b, i+1)
	for i < len(b) && b[i] == '"' {
		ne := jsontext.SkipString(b, i)
		name := b[i+1 : ne-1]
		i = jsontext.SpaceEnd(b, ne)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = jsontext.SpaceEnd(b, i+1)
		if i >= len(b) {
			return -1
		}
		if i = fn(name, i); i < 0 {
			return -1
		}
		if i = jsontext.SpaceEnd(b, i); i < len(b) && b[i] == ',' {
			i = jsontext.SpaceEnd(b, i+1)
		}
	}
	if i >= len(b) || b[i] != '}' {
		return -1
	}
	return i + 1
}

// walkArray walks the array that starts at b[i] as walkObject walks an
// object: fn gets the index of each element and returns the index just
// past it, or -1.
func walkArray(b []byte, i int, fn func(j int) int) int {
	i = jsontext.SpaceEnd(b, i)
	if i >= len(b) || b[i] != '[' {
		return -1
	}
	i = jsontext.SpaceEnd(b, i+1)
	for i < len(b) && b[i] != ']' {
		if i = fn(i); i < 0 {
			return -1
		}
		if i = jsontext.SpaceEnd(b, i); i < len(b) && b[i] == ',' {
			i = jsontext.SpaceEnd(b, i+1)
		}
	}
	if i >= len(b) {
		return -1
	}
	return i + 1
}

// stringAt decodes the JSON string at b[j] into dst, through in when it
// is not nil, and returns the index just past it, or -1 when the value
// there is not a string.
func stringAt(b []byte, j int, dst *string, in *interner) int {
	if b[j] != '"' {
		return -1
	}
	e := jsontext.SkipString(b, j)
	if in != nil && bytes.IndexByte(b[j+1:e-1], '\\') < 0 {
		*dst = in.str(b[j+1 : e-1])
		return e
	}
	s, ok := stringValue(b[j:e])
	if !ok {
		return -1
	}
	*dst = s
	return e
}

// interner shares the strings of the envelope fields that repeat from
// message to message (type, subject, source, contract, …), so that
// decoding them costs no allocation once seen. One goroutine uses it. It
// holds at most internMax strings of at most internLen bytes, each its own
// allocation: it pins no frame's buffer.
type interner struct{ m map[string]string }

const (
	internMax = 256
	internLen = 128
)

func (in *interner) str(b []byte) string {
	if len(b) > internLen {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in.m) < internMax {
		if in.m == nil {
			in.m = make(map[string]string)
		}
		in.m[s] = s
	}
	return s
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

// decodeMessageFast decodes the envelope v as encoding/json would decode
// it into a pigeon.Message; ok is false when it cannot say so for sure.
func decodeMessageFast(v []byte, in *interner) (*pigeon.Message, bool) {
	m, end := messageAt(v, 0, in)
	return m, end >= 0 && jsontext.SpaceEnd(v, end) == len(v)
}

// messageAt decodes the envelope at b[i] and returns the index just past
// it, or -1.
func messageAt(b []byte, i int, in *interner) (*pigeon.Message, int) {
	if i >= len(b) || b[i] != '{' {
		return nil, -1
	}
	m := new(pigeon.Message)
	end := walkObject(b, i, func(name []byte, j int) int {
		var (
			dst    *string
			shared *interner // for the fields that repeat across messages
		)
		switch string(name) {
		case "specversion":
			dst, shared = &m.SpecVersion, in
		case "id":
			dst = &m.ID
		case "type":
			dst, shared = &m.Type, in
		case "source":
			dst, shared = &m.Source, in
		case "subject":
			dst, shared = &m.Subject, in
		case "time":
			dst = &m.Time
		case "intent":
			dst, shared = &m.Intent, in
		case "idempotencyKey":
			dst = &m.IdempotencyKey
		case "classification":
			dst, shared = &m.Classification, in
		case "region":
			dst, shared = &m.Region, in
		case "replyTo":
			dst = &m.ReplyTo
		case "correlationId":
			dst = &m.CorrelationID
		case "reason":
			dst = &m.Reason
		case "contractId":
			dst, shared = &m.ContractID, in
		case "subjectId":
			dst, shared = &m.SubjectID, in
		case "schemaId":
			dst, shared = &m.SchemaID, in
		case "acceptedAt":
			dst = &m.AcceptedAt
		case "data":
			e := jsontext.SkipValue(b, j)
			if string(b[j:e]) == "null" {
				return -1
			}
			m.Data = append(json.RawMessage(nil), b[j:e]...)
			return e
		case "sequence":
			e := jsontext.SkipValue(b, j)
			n, err := strconv.ParseUint(string(b[j:e]), 10, 64)
			if err != nil {
				return -1
			}
			m.Sequence = n
			return e
		case "signature":
			sig, e := signatureAt(b, j)
			m.Signature = sig
			return e
		default:
			return -1 // unknown, another case, or escaped: encoding/json decides
		}
		return stringAt(b, j, dst, shared)
	})
	return m, end
}

func signatureAt(b []byte, i int) (*pigeon.Signature, int) {
	sig := new(pigeon.Signature)
	end := walkObject(b, i, func(name []byte, j int) int {
		switch string(name) {
		case "kid":
			return stringAt(b, j, &sig.KID, nil)
		case "alg":
			return stringAt(b, j, &sig.Alg, nil)
		case "sig":
			return stringAt(b, j, &sig.Sig, nil)
		}
		return -1
	})
	return sig, end
}

// decodeFrameFast decodes a frame of the publish path; ok is false when
// the frame is not one it decodes exactly as encoding/json does.
func decodeFrameFast(b []byte, in *interner) (f *Frame, ok bool) {
	f = new(Frame)
	var messages []byte
	end := walkObject(b, 0, func(name []byte, j int) int {
		switch string(name) {
		case "op":
			return stringAt(b, j, &f.Op, in)
		case "id":
			return stringAt(b, j, &f.ID, nil)
		case "re":
			return stringAt(b, j, &f.Re, nil)
		case "sub":
			return stringAt(b, j, &f.Sub, in)
		case "status":
			return stringAt(b, j, &f.Status, in)
		case "message":
			m, e := messageAt(b, j, in)
			f.Message = m
			return e
		case "messages":
			// Split now, decoded below once the op is known.
			e := jsontext.SkipValue(b, j)
			messages = b[j:e]
			if b[j] != '[' {
				return -1
			}
			return e
		case "results":
			var e int
			f.Results, e = resultsAt(b, j, in)
			return e
		case "deliveries":
			var e int
			f.Deliveries, e = deliveriesAt(b, j, in)
			return e
		case "attempt", "timeoutMs":
			e := jsontext.SkipValue(b, j)
			n, err := strconv.ParseInt(string(b[j:e]), 10, 64)
			if err != nil {
				return -1
			}
			if name[0] == 'a' {
				if int64(int(n)) != n {
					return -1
				}
				f.Attempt = int(n)
			} else {
				f.TimeoutMs = n
			}
			return e
		}
		return -1
	})
	if end < 0 || jsontext.SpaceEnd(b, end) != len(b) {
		return nil, false
	}
	if messages != nil {
		if f.Op == OpPublishBatch {
			f.Batch = splitBatch(messages)
		} else if f.Messages, ok = decodeMessagesFast(messages, in); !ok {
			return nil, false
		}
	}
	return f, true
}

// splitBatch copies the elements of the array v, undecoded: each message
// of a batch is decoded, and refused, on its own.
func splitBatch(v []byte) []json.RawMessage {
	own := append([]byte(nil), v...)
	out := []json.RawMessage{}
	walkArray(own, 0, func(j int) int {
		e := jsontext.SkipValue(own, j)
		out = append(out, own[j:e:e])
		return e
	})
	return out
}

func decodeMessagesFast(v []byte, in *interner) ([]*pigeon.Message, bool) {
	out := []*pigeon.Message{}
	end := walkArray(v, 0, func(j int) int {
		m, e := messageAt(v, j, in)
		out = append(out, m)
		return e
	})
	return out, end >= 0
}

// deliveriesAt decodes the deliveries of a deliver_batch: objects of an
// attempt and a message.
func deliveriesAt(b []byte, i int, in *interner) ([]DeliveryEntry, int) {
	out := []DeliveryEntry{}
	end := walkArray(b, i, func(j int) int {
		var d DeliveryEntry
		e := walkObject(b, j, func(name []byte, k int) int {
			switch string(name) {
			case "attempt":
				e := jsontext.SkipValue(b, k)
				n, err := strconv.ParseInt(string(b[k:e]), 10, 64)
				if err != nil || int64(int(n)) != n {
					return -1
				}
				d.Attempt = int(n)
				return e
			case "message":
				m, e := messageAt(b, k, in)
				d.Message = m
				return e
			}
			return -1
		})
		out = append(out, d)
		return e
	})
	return out, end
}

func resultsAt(b []byte, i int, in *interner) ([]BatchResult, int) {
	out := []BatchResult{}
	end := walkArray(b, i, func(j int) int {
		var r BatchResult
		e := walkObject(b, j, func(name []byte, k int) int {
			switch string(name) {
			case "status":
				return stringAt(b, k, &r.Status, in)
			case "message":
				m, e := messageAt(b, k, in)
				r.Message = m
				return e
			case "error":
				e := jsontext.SkipValue(b, k)
				if b[k] != '{' {
					return -1
				}
				r.Error = new(wire.Error)
				if json.Unmarshal(b[k:e], r.Error) != nil {
					return -1
				}
				return e
			}
			return -1
		})
		out = append(out, r)
		return e
	})
	return out, end
}
