package schema

import (
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/xeipuuv/gojsonschema"
)

// format: "regex" judges each data string as gojsonschema's checker does
// (regexp.Compile), without building the program: a string of 64 KiB
// cost about a thousand bytes of allocation per byte to compile, and
// costs under a hundred to parse.
func TestRegexFormatParsesOnly(t *testing.T) {
	sch, err := Compile([]byte(`{"type":"object","properties":{"r":{"format":"regex"}}}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		data string
		ok   bool
	}{
		{`{"r":"^[a-z]+$"}`, true},
		{`{"r":""}`, true},
		{`{"r":"("}`, false},
		{`{"r":"a{1001}"}`, false},
		{`{"r":"(?<name>x)"}`, true},
		{`{"r":"\\8"}`, false},
		{`{"r":1}`, false}, // the library's checker takes no number for a regex
		{`{"r":null}`, true},
	} {
		got := sch.Validate(nil, []byte(tc.data))
		require.Equal(t, tc.ok, got == "", "%s: %s", tc.data, got)
	}

	raw := []byte(`{"r":"` + strings.Repeat("a{2,9}", 64<<10/6) + `"}`)
	require.Empty(t, sch.Validate(nil, raw))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	require.Empty(t, sch.Validate(nil, raw))
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(300*len(raw)), "bytes allocated to validate %d bytes", len(raw))
}

// FuzzRegexFormat holds the format: "regex" checker to the library's
// verdict, which is regexp.Compile's.
func FuzzRegexFormat(f *testing.F) {
	for _, s := range []string{"", "a", "(", "[a-z]{3}", `\pL+`, "a{2,1000}", "a{1001}", "(?i)x", "(?P<n>a)", "(?<n>a)", `\Q(\E`, "x**", "[[:alpha:]]", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := regexp.Compile(s)
		require.Equal(t, err == nil, regexFormat{}.IsFormat(s), "%q", s)
		require.Equal(t, gojsonschema.RegexFormatChecker{}.IsFormat(s), regexFormat{}.IsFormat(s), "%q", s)
	})
}
