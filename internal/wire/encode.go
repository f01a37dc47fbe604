package wire

import (
	"pigeon"
	"pigeon/internal/jsontext"
)

// AppendResult appends the answer to an accepted publish,
// {"status":…,"message":{…}}, byte for byte as json.Marshal(res) writes
// it, without reflection. The message's data must be valid JSON, as the
// data of every message the engine accepted or stored is; it is written
// compact and with <, >, &, U+2028 and U+2029 escaped in its strings, as
// encoding/json writes the output of a json.Marshaler.
func AppendResult(b []byte, res *pigeon.Result) []byte {
	b = append(b, `{"status":`...)
	b = jsontext.AppendString(b, res.Status)
	b = append(b, `,"message":`...)
	if res.Message == nil {
		return append(b, "null}"...)
	}
	m := res.Message
	if needsCompact(m.Data) {
		c := *m
		c.Data = appendCompact(make([]byte, 0, len(m.Data)+16), m.Data)
		m = &c
	}
	b = m.AppendJSON(b)
	return append(b, '}')
}

// needsCompact reports whether appendCompact would change the valid JSON
// text v: whitespace outside its strings, or a character encoding/json
// escapes for HTML inside them.
func needsCompact(v []byte) bool {
	in := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '"':
			in = !in
		case '\\':
			if in {
				i++
			}
		case ' ', '\t', '\n', '\r':
			if !in {
				return true
			}
		case '<', '>', '&':
			return true
		case 0xE2:
			if i+2 < len(v) && v[i+1] == 0x80 && v[i+2]&^1 == 0xA8 {
				return true
			}
		}
	}
	return false
}

// appendCompact appends the valid JSON text v without whitespace outside
// its strings and with <, >, &, U+2028 and U+2029 escaped inside them, as
// encoding/json compacts a json.Marshaler's output.
func appendCompact(b, v []byte) []byte {
	const hex = "0123456789abcdef"
	in := false
	start := 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '"':
			in = !in
		case '\\':
			if in {
				i++
			}
		case ' ', '\t', '\n', '\r':
			if !in {
				b = append(b, v[start:i]...)
				start = i + 1
			}
		case '<', '>', '&':
			b = append(b, v[start:i]...)
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case 0xE2:
			if i+2 < len(v) && v[i+1] == 0x80 && v[i+2]&^1 == 0xA8 {
				b = append(b, v[start:i]...)
				b = append(b, '\\', 'u', '2', '0', '2', hex[v[i+2]&0xF])
				i += 2
				start = i + 1
			}
		}
	}
	return append(b, v[start:]...)
}
