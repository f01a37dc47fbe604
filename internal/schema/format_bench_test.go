package schema

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
)

// regexShapes are strings of about 1 MiB, the default largest WebSocket
// frame, that a schema with format: regex checks.
var regexShapes = []struct{ name, s string }{
	{"letters", strings.Repeat("a", 1<<20)},
	{"classes", strings.Repeat("[a-z]", 1<<20/5)},
	{"unicode", strings.Repeat(`\pL`, 1<<20/3)},
	{"groups", strings.Repeat("(a)", 1<<20/3)},
	{"alternation", strings.Repeat("a|", 1<<19)},
	{"repeats", strings.Repeat("a{2,9}", 1<<20/6)},
}

func BenchmarkRegexFormat(b *testing.B) {
	for _, sh := range regexShapes {
		b.Run(sh.name+"/compile", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = regexp.Compile(sh.s)
			}
		})
		b.Run(sh.name+"/parse", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = syntax.Parse(sh.s, syntax.Perl)
			}
		})
	}
}

// BenchmarkRegexFormatSchema validates a message of one 1 MiB string
// against {"format":"regex"}: each data string is parsed, once.
func BenchmarkRegexFormatSchema(b *testing.B) {
	sch, err := Compile([]byte(`{"type":"object","properties":{"r":{"type":"string","format":"regex"}}}`))
	if err != nil {
		b.Fatal(err)
	}
	for _, sh := range regexShapes {
		raw := []byte(`{"r":"` + strings.ReplaceAll(sh.s, `\`, `\\`) + `"}`)
		b.Run(sh.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = sch.Validate(nil, raw)
			}
		})
	}
}
