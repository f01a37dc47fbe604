package guest

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The envelope crosses the sandbox as JSON. Reflection-based encoding/json
// is slow inside WebAssembly, so the envelope (a flat object of strings,
// a sequence number and the raw data) is read and written here by hand;
// the data is left to the handler.

var errEnvelope = errors.New("guest: the message is not a JSON envelope")

// decodeMessage reads the envelope b into m: its string members, its
// sequence and its data (kept raw). Other members are skipped.
func decodeMessage(b []byte, m *Message) error {
	if !json.Valid(b) {
		return errEnvelope
	}
	s := scanner{b: b}
	s.space()
	if !s.eat('{') {
		return errEnvelope
	}
	for {
		s.space()
		if s.eat('}') {
			return nil
		}
		s.eat(',')
		s.space()
		key, err := s.str()
		if err != nil {
			return err
		}
		s.space()
		s.eat(':')
		s.space()
		start := s.i
		s.skip()
		raw := b[start:s.i]
		if key == "data" {
			m.Data = json.RawMessage(raw)
			continue
		}
		if key == "sequence" {
			if n, err := strconv.ParseUint(string(raw), 10, 64); err == nil {
				m.Sequence = n
			}
			continue
		}
		f := m.field(key)
		if f == nil || raw[0] != '"' {
			continue
		}
		v, err := (&scanner{b: raw}).str()
		if err != nil {
			return err
		}
		*f = v
	}
}

// field is the string field of m named key in JSON, or nil.
func (m *Message) field(key string) *string {
	switch key {
	case "id":
		return &m.ID
	case "type":
		return &m.Type
	case "source":
		return &m.Source
	case "subject":
		return &m.Subject
	case "time":
		return &m.Time
	case "intent":
		return &m.Intent
	case "idempotencyKey":
		return &m.IdempotencyKey
	case "classification":
		return &m.Classification
	case "region":
		return &m.Region
	case "replyTo":
		return &m.ReplyTo
	case "correlationId":
		return &m.CorrelationID
	case "reason":
		return &m.Reason
	}
	return nil
}

// appendMessage appends m as JSON, as json.Marshal writes it but for
// HTML escaping: empty fields left out, Data as it is (it must be JSON).
func appendMessage(b []byte, m *Message) ([]byte, error) {
	if len(m.Data) > 0 && !json.Valid(m.Data) {
		return b, errors.New("guest: the message's data is not JSON")
	}
	b = append(b, '{')
	first := true
	member := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, name)
		b = append(b, ':')
	}
	for _, f := range [...]struct {
		name string
		v    string
	}{{"id", m.ID}, {"type", m.Type}, {"source", m.Source}, {"subject", m.Subject}, {"time", m.Time}, {"intent", m.Intent},
		{"idempotencyKey", m.IdempotencyKey}, {"classification", m.Classification}, {"region", m.Region}} {
		if f.v != "" {
			member(f.name)
			b = appendString(b, f.v)
		}
	}
	if len(m.Data) > 0 {
		member("data")
		b = append(b, m.Data...)
	}
	for _, f := range [...]struct {
		name string
		v    string
	}{{"replyTo", m.ReplyTo}, {"correlationId", m.CorrelationID}, {"reason", m.Reason}} {
		if f.v != "" {
			member(f.name)
			b = appendString(b, f.v)
		}
	}
	if m.Sequence != 0 {
		member("sequence")
		b = strconv.AppendUint(b, m.Sequence, 10)
	}
	return append(b, '}'), nil
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD,
// as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// scanner walks JSON text already known to be valid.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// skip passes one value.
func (s *scanner) skip() {
	depth := 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			s.skipString()
			if depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				s.i++
				return
			}
		case ',':
			if depth == 0 {
				return
			}
		}
		s.i++
		if depth == 0 && (s.i >= len(s.b) || isDelim(s.b[s.i])) {
			return
		}
	}
}

func isDelim(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func (s *scanner) skipString() {
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return
		}
	}
}

// str reads a string, decoding its escapes.
func (s *scanner) str() (string, error) {
	if !s.eat('"') {
		return "", errEnvelope
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != '"' && s.b[s.i] != '\\' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '"' {
		s.i++
		return string(s.b[start : s.i-1]), nil // no escape: the common case
	}
	out := append([]byte(nil), s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), nil
		case c != '\\':
			out = append(out, c)
			s.i++
			continue
		}
		s.i++
		if s.i >= len(s.b) {
			break
		}
		e := s.b[s.i]
		s.i++
		switch e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := s.hex4()
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					if r2 = utf16.DecodeRune(r, s.hex4()); r2 == utf8.RuneError {
						s.i = save
					}
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, e)
		}
	}
	return "", errEnvelope
}

// hex4 reads the four hex digits of a \u escape.
func (s *scanner) hex4() rune {
	if s.i+4 > len(s.b) {
		s.i = len(s.b)
		return utf8.RuneError
	}
	n, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	s.i += 4
	if err != nil {
		return utf8.RuneError
	}
	return rune(n)
}
