package schema

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

var patternSeeds = []string{
	`^[A-Z]{3}$`, `^[a-z0-9_-]+$`, `^[A-Z]{2}[0-9]{4}$`, `^tok_[a-f0-9]{8,12}$`, `^\d{4}-\d{2}-\d{2}$`,
	`^[a-z]*$`, `^a?b$`, `^[-a]{2}x*$`, `^[a-]{1,3}$`, `^\.\-{2}$`, `^[.+*?/$()|{}]+$`, `^$`,
	`^[^a]$`, `^[a-z]+[0-9]$`, `^a{2,}b$`, `^a{,3}$`, `^a+?$`, `^[[:alpha:]]$`, `^(a|b)$`, `^.$`, `a`, `^a`, `^a\$`,
	`^[z-a]$`, `^a{3,2}$`, `^é$`, `^[a-z]{0}$`, `^x{1001}$`, `^[\d_]{2}$`, `^\w$`,
}

func TestAnchoredPattern(t *testing.T) {
	cases := []struct {
		pattern string
		simple  bool
		yes, no []string
	}{
		{`^[A-Z]{3}$`, true, []string{"GBP", "USD"}, []string{"gbp", "GB", "GBPX", "", "GB1", "GBÉ"}},
		{`^[a-z0-9_-]+$`, true, []string{"a", "svc-checkout_2"}, []string{"", "A", "a b", "a.b"}},
		{`^[A-Z]{2}[0-9]{4}$`, true, []string{"GB1234"}, []string{"GB123", "G12345", "GB12345"}},
		{`^\d{4}-\d{2}-\d{2}$`, true, []string{"2026-11-29"}, []string{"2026-1-29", "2026/11/29"}},
		{`^a?b$`, false, []string{"b", "ab"}, []string{"aab", "a"}},
		{`^a{2,}b$`, false, []string{"aab", "aaab"}, []string{"ab"}}, // variable atom first: regexp
		{`^[a-z]+[0-9]$`, false, []string{"ab1"}, []string{"ab"}},
		{`^[^a]$`, false, []string{"b"}, []string{"a"}},
		{`^(a|b)$`, false, []string{"a"}, []string{"c"}},
		{`a`, false, []string{"xax"}, []string{"x"}}, // not anchored
	}
	for _, c := range cases {
		t.Run(c.pattern, func(t *testing.T) {
			p, ok := parseAnchoredPattern(c.pattern)
			require.Equal(t, c.simple, ok)
			re := regexp.MustCompile(c.pattern)
			for _, s := range c.yes {
				require.True(t, re.MatchString(s), s)
				if ok {
					require.True(t, p.match(s), s)
				}
			}
			for _, s := range c.no {
				require.False(t, re.MatchString(s), s)
				if ok {
					require.False(t, p.match(s), s)
				}
			}
		})
	}
}

// FuzzAnchoredPattern holds the fast matcher to regexp: for every pattern
// it accepts, it must answer as regexp does on every input.
func FuzzAnchoredPattern(f *testing.F) {
	for _, p := range patternSeeds {
		for _, s := range []string{"", "GBP", "ab1", "2026-11-29", "--x", "aab", "é", ".-", "a\xff"} {
			f.Add(p, s)
		}
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		p, ok := parseAnchoredPattern(pattern)
		if !ok {
			return
		}
		if got, want := p.match(s), re.MatchString(s); got != want {
			t.Fatalf("pattern %q on %q: fast %v, regexp %v", pattern, s, got, want)
		}
	})
}
