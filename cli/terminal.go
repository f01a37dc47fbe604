package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// What the client commands print comes, much of it, from others: a
// publisher's message, a principal id an identity provider issued, the
// body a server (anyone's, behind --url) answered, a data directory's
// log. A terminal acts on some of what that text may hold: C0 controls
// (ESC starts a sequence, CR returns to the start of the line), DEL, C1
// controls (U+009B is CSI) and bytes that are not UTF-8 (0x9b alone is
// CSI to an 8-bit terminal). JSON is printed through terminalSafeJSON or
// writeJSONLine, other text through printable; %q is safe too
// (strconv.Quote escapes what is not printable).

// terminalSafeJSON returns the JSON text b with what a terminal would act
// on escaped, so that it reads as the same JSON. JSON allows DEL, C1
// controls (U+009B is CSI) and, as Go reads it, bytes that are not UTF-8
// unescaped in a string, and in valid JSON text they can be nowhere else:
// each is written as a \u escape, a byte that is not UTF-8 as \ufffd (as
// a decoder reads it). C0 controls cannot be in a string unescaped, and
// between tokens b must hold none (json.Indent and json.Compact rewrite
// that space).
func terminalSafeJSON(b []byte) []byte {
	unsafe := func(r rune, n int) bool {
		return r == 0x7f || r >= 0x80 && r < 0xa0 || r == utf8.RuneError && n == 1
	}
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if !unsafe(r, n) {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r == utf8.RuneError {
			r = unicode.ReplacementChar
		}
		out = fmt.Appendf(out, `\u%04x`, r)
		i += n
	}
	if out == nil {
		return b
	}
	return out
}

// writeJSONLine writes v as json.Encoder would, one line of JSON, but
// terminal-safe (terminalSafeJSON): the same JSON, with what a terminal
// would act on escaped.
func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(terminalSafeJSON(b), '\n'))
	return err
}

// terminalSafeRecords is a writer for a log handler that writes each
// record whole in one Write, as slog's handlers do: each is written
// through terminalSafeJSON. slog's JSON escapes C0 controls and writes
// bytes that are not UTF-8 as \ufffd, but leaves DEL and C1 controls raw
// in a string; its text quotes a value with either, but writes DEL raw
// in one it does not quote. terminalSafeJSON escapes them as JSON does,
// which reads as the same JSON, and as text reads as the byte it was.
type terminalSafeRecords struct{ w io.Writer }

func (t terminalSafeRecords) Write(p []byte) (int, error) {
	if _, err := t.w.Write(terminalSafeJSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
