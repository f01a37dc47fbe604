package schema

import (
	"math"
	"strconv"
	"strings"
)

// anchoredPattern matches the simple patterns schemas use most, such as
// ^[A-Z]{3}$ or ^[a-z0-9_-]+$, without the regexp engine: a sequence of
// ASCII character sets, each repeated between min and max times, anchored
// at both ends. Every set but the last repeats a fixed number of times, so
// matching greedily, left to right, never needs to back up and gives what
// the regexp gives (a differential fuzz test holds it to that).
type anchoredPattern []patternAtom

type patternAtom struct {
	set      [2]uint64 // bit c set: ASCII byte c matches
	min, max int       // max < 0: no limit
}

// parseAnchoredPattern returns the pattern when p has that simple form.
func parseAnchoredPattern(p string) (anchoredPattern, bool) {
	if len(p) < 2 || p[0] != '^' || p[len(p)-1] != '$' || strings.HasSuffix(p, `\$`) {
		return nil, false
	}
	s := p[1 : len(p)-1]
	var out anchoredPattern
	for len(s) > 0 {
		var a patternAtom
		var ok bool
		if s, ok = a.parseSet(s); !ok {
			return nil, false
		}
		if s, ok = a.parseRepeat(s); !ok {
			return nil, false
		}
		if n := len(out); n > 0 && out[n-1].min != out[n-1].max {
			return nil, false // a variable atom before this one could need backing up
		}
		out = append(out, a)
	}
	return out, true
}

func (a *patternAtom) add(c byte) { a.set[c>>6] |= 1 << (c & 63) }

func (a *patternAtom) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		a.add(byte(c))
	}
}

// isPlain is a byte that stands for itself, in a set or out of one.
func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ' ' || c == ':' || c == '@' || c == '#' || c == ','
}

// isEscapable is a punctuation byte that a backslash makes literal.
func isEscapable(c byte) bool { return strings.IndexByte(`.-+*?()[]{}|^$\/`, c) >= 0 }

// parseSet reads one literal, \d, or bracketed set of literals and ranges.
func (a *patternAtom) parseSet(s string) (string, bool) {
	switch c := s[0]; {
	case isPlain(c) || c == '-':
		a.add(c)
		return s[1:], true
	case c == '\\':
		if len(s) < 2 {
			return s, false
		}
		if s[1] == 'd' {
			a.addRange('0', '9')
			return s[2:], true
		}
		if !isEscapable(s[1]) {
			return s, false
		}
		a.add(s[1])
		return s[2:], true
	case c != '[':
		return s, false
	}
	s = s[1:]
	first := true
	for {
		if len(s) == 0 {
			return s, false
		}
		c := s[0]
		switch {
		case c == ']' && !first:
			return s[1:], true
		case c == '^' && first:
			return s, false // negated sets are left to regexp
		case c == '\\':
			if len(s) < 2 {
				return s, false
			}
			if s[1] == 'd' {
				a.addRange('0', '9')
			} else if isEscapable(s[1]) {
				a.add(s[1])
			} else {
				return s, false
			}
			s = s[2:]
		case isPlain(c) || c == '.' || c == '+' || c == '*' || c == '?' || c == '/' || c == '$' || c == '(' || c == ')' || c == '|' || c == '{' || c == '}':
			if len(s) >= 3 && s[1] == '-' && s[2] != ']' {
				hi := s[2]
				if !isPlain(hi) || hi < c {
					return s, false
				}
				a.addRange(c, hi)
				s = s[3:]
			} else {
				a.add(c)
				s = s[1:]
			}
		case c == '-' && (first || len(s) > 1 && s[1] == ']'):
			a.add('-')
			s = s[1:]
		default:
			return s, false
		}
		first = false
	}
}

// parseRepeat reads an optional ?, *, +, {n}, {n,} or {n,m}.
func (a *patternAtom) parseRepeat(s string) (string, bool) {
	a.min, a.max = 1, 1
	if len(s) == 0 {
		return s, true
	}
	switch s[0] {
	case '?':
		a.min, a.max = 0, 1
		return s[1:], true
	case '*':
		a.min, a.max = 0, -1
		return s[1:], true
	case '+':
		a.min, a.max = 1, -1
		return s[1:], true
	case '{':
	default:
		return s, true
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return s, false
	}
	body := s[1:end]
	lo, hi, comma := strings.Cut(body, ",")
	n, err := strconv.Atoi(lo)
	if err != nil || n < 0 || n > 1000 || lo != strconv.Itoa(n) {
		return s, false
	}
	a.min, a.max = n, n
	if comma {
		a.max = -1
		if hi != "" {
			m, err := strconv.Atoi(hi)
			if err != nil || m < n || m > 1000 || hi != strconv.Itoa(m) {
				return s, false
			}
			a.max = m
		}
	}
	if len(s) > end+1 && (s[end+1] == '?' || s[end+1] == '+') {
		return s, false // lazy and possessive forms are left to regexp
	}
	return s[end+1:], true
}

func (a *patternAtom) has(c byte) bool { return c < 128 && a.set[c>>6]&(1<<(c&63)) != 0 }

// match reports whether all of s matches.
func (p anchoredPattern) match(s string) bool {
	i := 0
	for _, a := range p {
		max := a.max
		if max < 0 {
			max = math.MaxInt
		}
		n := 0
		for n < max && i < len(s) && a.has(s[i]) {
			i++
			n++
		}
		if n < a.min {
			return false
		}
	}
	return i == len(s)
}
