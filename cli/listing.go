package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxPageRecords is the most records the server sends in one page of a
// listing the client commands read (GET /v1/audit, GET /v1/quarantine,
// GET /v1/audit/receipts/{id}): its default and cap of ?max=, maxRecords
// in server/routes.go (docs/http.md).
const maxPageRecords = 10000

// recordPage is the list of records of one listing answer. A list of more
// than maxPageRecords entries is no server's, and json.Unmarshal of it
// fails before a single entry is decoded: maxAnswerBytes of `{}` entries
// is about 89 million of them, each an allocation (a json.RawMessage) or
// hundreds of bytes (a pigeon.AuditRecord), many GiB for one page.
type recordPage[T any] []T

// UnmarshalJSON decodes the array b as a []T, unless it holds more than
// maxPageRecords entries.
func (p *recordPage[T]) UnmarshalJSON(b []byte) error {
	if entries(b, maxPageRecords) > maxPageRecords {
		return fmt.Errorf("the server listed more than %d records in one page, more than it ever sends: the page is not read", maxPageRecords)
	}
	return json.Unmarshal(b, (*[]T)(p))
}

// entries counts the entries of the JSON array b, up to one past most
// (0 for a value that is no array). b is valid JSON, as json.Unmarshal
// hands it to an Unmarshaler once it has checked the whole answer.
func entries(b []byte, most int) int {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || len(bytes.TrimSpace(b[1:len(b)-1])) == 0 {
		return 0
	}
	n, depth := 1, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			if n++; n > most {
				return n
			}
		}
	}
	return n
}
