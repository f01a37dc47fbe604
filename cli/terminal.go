package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"pigeon/internal/textrule"
)

// What the client commands print comes, much of it, from others: a
// publisher's message, a principal id an identity provider issued, the
// body a server (anyone's, behind --url) answered, a data directory's
// log. A terminal acts on some of what that text may hold: C0 controls
// (ESC starts a sequence, CR returns to the start of the line), DEL, C1
// controls (U+009B is CSI) and bytes that are not UTF-8 (0x9b alone is
// CSI to an 8-bit terminal). Others rearrange what it shows: the
// formatting characters that reorder text or break its line
// (reordering). JSON is printed through terminalSafeJSON or
// writeJSONLine, other text through printable; %q is safe too
// (strconv.Quote escapes what is not printable, these included).

// reordering reports whether r is a formatting character that reorders
// the text around it or breaks its line where a terminal, console or log
// viewer shows it ("Trojan Source", CVE-2021-42574: "alice\u202Egnp.exe"
// shows as "aliceexe.png"): U+061C ARABIC LETTER MARK, U+200E and U+200F
// (the left-to-right and right-to-left marks), U+2028 LINE SEPARATOR and
// U+2029 PARAGRAPH SEPARATOR, U+202A to U+202E (the embeddings and
// overrides) and U+2066 to U+2069 (the isolates). They are the ones the
// broker refuses in a name, as it refuses a control character, read from
// its one rule (textrule.IsFormatting); a record stored before it did, or
// a message's data (a selector's value), may still hold them. The zero
// width joiners (U+200C, U+200D) reorder nothing and are text.
func reordering(r rune) bool { return textrule.IsFormatting(r) }

// terminalSafeJSON returns the JSON text b with what a terminal would act
// on, or would reorder, escaped, so that it reads as the same JSON. JSON
// allows DEL, C1 controls (U+009B is CSI), the formatting characters
// that reorder text (reordering) and, as Go reads it, bytes that are not
// UTF-8 unescaped in a string, and in valid JSON text they can be nowhere
// else: each is written as a \u escape, a byte that is not UTF-8 as
// \ufffd (as a decoder reads it). C0 controls cannot be in a string
// unescaped, and between tokens b must hold none (json.Indent and
// json.Compact rewrite that space).
func terminalSafeJSON(b []byte) []byte {
	unsafe := func(r rune, n int) bool {
		return r == 0x7f || r >= 0x80 && r < 0xa0 || r == utf8.RuneError && n == 1 || reordering(r)
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

// printable returns s, text that may come from a file or a peer (a policy
// file's field name, a record's principal), with what a terminal would
// act on, or would reorder, written as Go escapes: C0 controls but tab
// (\x1b, \x0a: a line of its own would fake a line of output), DEL, C1
// controls (\u009b), the formatting characters that reorder text or break
// its line (reordering: \u202e, \u2028) and bytes that are not UTF-8
// (\x9b is CSI to an 8-bit terminal).
func printable(s string) string {
	unsafe := func(r rune) bool {
		return r < 0x20 && r != '\t' || r >= 0x7f && r < 0xa0 || r == utf8.RuneError || reordering(r)
	}
	i := strings.IndexFunc(s, unsafe)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1, r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unsafe(r) && r != utf8.RuneError:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}
