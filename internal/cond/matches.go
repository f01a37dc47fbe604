package cond

import (
	"regexp"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/env"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// maxMatchWork bounds one call of matches: the text's length times the
// pattern's, about the steps Go's regexp may take (it runs a pattern in
// time linear in the text, times the pattern's size: a 1,000-character
// pattern over 1 MiB took 8 s). Past it the call is an error, so the
// condition fails closed, without running the pattern. 2^22 is a
// 64-character pattern over 64 KiB, a few milliseconds at worst.
const maxMatchWork = 1 << 22

// maxCachedPatterns bounds the compiled patterns kept for reuse. A pattern
// is most often a constant of the expression; one taken from the data is
// compiled at each call once the cache is full.
const maxCachedPatterns = 1024

// celMatches replaces the standard library's matches (same overloads,
// same RE2 syntax) with one that refuses the work maxMatchWork does not
// allow before it runs the pattern: cel-go prices a call only once it has
// returned, so no cost limit could stop it.
func celMatches() []cel.EnvOption {
	return []cel.EnvOption{
		cel.StdLib(cel.StdLibSubset(&env.LibrarySubset{ExcludeFunctions: []*env.Function{{Name: "matches"}}})),
		cel.Function("matches",
			cel.MemberOverload(matchesMember, []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType),
			cel.Overload(matchesGlobal, []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType),
			cel.SingletonBinaryBinding(matches)),
	}
}

// The overloads of celMatches, named apart from the standard library's so
// that cel-go's own compilation of constant patterns (which runs them
// unchecked) does not take them: regexConstants does, with the check.
const (
	matchesMember = "pigeon_matches_string"
	matchesGlobal = "pigeon_matches"
)

// regexConstants compiles the constant patterns of celMatches' calls when
// the program is planned, keeping the check of each call's work.
func regexConstants() cel.ProgramOption {
	opt := func(overload string) *interpreter.RegexOptimization {
		return &interpreter.RegexOptimization{Function: "matches", OverloadID: overload, RegexIndex: 1,
			Factory: func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
				re, err := regexp.Compile(pattern)
				if err != nil {
					return nil, err
				}
				return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(values ...ref.Val) ref.Val {
					if len(values) != 2 {
						return types.NoSuchOverloadErr()
					}
					s, ok := values[0].(types.String)
					if !ok {
						return types.NoSuchOverloadErr()
					}
					if err := matchWork(len(s), len(pattern)); err != nil {
						return err
					}
					return types.Bool(re.MatchString(string(s)))
				}), nil
			}}
	}
	return cel.OptimizeRegex(opt(matchesMember), opt(matchesGlobal))
}

// matchWork refuses a call of matches on a text of n bytes with a pattern
// of m bytes that maxMatchWork does not allow.
func matchWork(n, m int) ref.Val {
	if uint64(n)*uint64(max(m, 1)) > maxMatchWork {
		return types.NewErr("matches: a %d-byte text and a %d-byte pattern are more work than a condition may do", n, m)
	}
	return nil
}

var patterns sync.Map // pattern → *regexp.Regexp
var nPatterns = struct {
	sync.Mutex
	n int
}{}

func matches(text, pattern ref.Val) ref.Val {
	s, ok1 := text.(types.String)
	p, ok2 := pattern.(types.String)
	if !ok1 || !ok2 {
		return types.NoSuchOverloadErr()
	}
	if err := matchWork(len(s), len(p)); err != nil {
		return err
	}
	re, err := compiled(string(p))
	if err != nil {
		return types.WrapErr(err)
	}
	return types.Bool(re.MatchString(string(s)))
}

// compiled returns pattern compiled, from the cache when it holds it.
func compiled(pattern string) (*regexp.Regexp, error) {
	if re, ok := patterns.Load(pattern); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	nPatterns.Lock()
	if nPatterns.n < maxCachedPatterns {
		if _, loaded := patterns.LoadOrStore(pattern, re); !loaded {
			nPatterns.n++
		}
	}
	nPatterns.Unlock()
	return re, nil
}
