package ws

import (
	"bytes"
	"encoding/json"
)

// interner shares the strings of the envelope fields that repeat from
// message to message (type, subject, source, contract, …), so that
// decoding them costs no allocation once seen. One goroutine uses it. It
// holds at most internMax strings of at most internLen bytes, each its own
// allocation: it pins no frame's buffer.
//
// In front of its map, a small direct-mapped cache keyed by a cheap hash
// of a string's length and end bytes answers the strings that repeat from
// message to message with one comparison instead of a map lookup.
//
// Before both, each member of an envelope it shares has a slot of its own
// (fields) holding the value it had last: a subscription's messages
// mostly repeat them, and no two members then take turns in one slot.
type interner struct {
	m      map[string]string
	slots  [internSlots]string
	fields [mAcceptedAt + 1]string
}

// last returns, when the JSON string at b[j] (its opening quote) is the
// value the envelope's member k had last, that value and the index just
// past the string; ok is false otherwise. The value is a plain string
// (field keeps only those), so the text that holds its bytes and then a
// quote is that very string, and needs no scan.
func (in *interner) last(k int, b []byte, j int) (s string, end int, ok bool) {
	s = in.fields[k]
	e := j + 1 + len(s)
	if s == "" || e >= len(b) || b[e] != '"' || string(b[j+1:e]) != s {
		return "", 0, false
	}
	return s, e + 1, true
}

// field is str for the value b of the envelope's member k.
func (in *interner) field(k int, b []byte) string {
	if in.fields[k] == string(b) {
		return in.fields[k]
	}
	s := in.str(b)
	if len(b) <= internLen {
		in.fields[k] = s
	}
	return s
}

const (
	internMax   = 256
	internLen   = 128
	internSlots = 64 // a power of two
)

func (in *interner) str(b []byte) string {
	if len(b) == 0 || len(b) > internLen {
		return string(b)
	}
	slot := &in.slots[internSlot(b)]
	if *slot == string(b) {
		return *slot
	}
	s, ok := in.m[string(b)]
	if !ok {
		s = string(b)
		if len(in.m) >= internMax {
			return s
		}
		if in.m == nil {
			in.m = make(map[string]string)
		}
		in.m[s] = s
	}
	*slot = s
	return s
}

func internSlot(b []byte) int {
	return int(uint(len(b))*31+uint(b[0])*7+uint(b[len(b)-1])) & (internSlots - 1)
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
