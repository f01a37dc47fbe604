package policy

import (
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// A rule is a conjunction of conditions, and an empty condition matches
// everything. A field of a rule the broker does not know ("principal" for
// "principals", "role", or a condition of a newer broker) was ignored with
// a warning, so the rule stood without that condition: an allow rule
// written for one principal allowed every principal, and the broker
// started with it. Such a field is an error.
func TestUnknownRuleFieldIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name, file, data, field string
	}{
		{"json misspelt principals", "subjects/a.json",
			`{"name":"a.b","version":"v1","intents":["x"],"policy":{"publish":[{"effect":"allow","principles":["spiffe://td/only"]}]}}`,
			"policy.publish[0].principles"},
		{"json singular principal on receive", "subjects/a.json",
			`{"name":"a.b","version":"v1","intents":["x"],"policy":{"receive":[{"effect":"allow","principal":"spiffe://td/only"}]}}`,
			"policy.receive[0].principal"},
		{"yaml unknown condition", "subjects/a.yaml",
			"name: a.b\nversion: v1\nintents: [x]\npolicy:\n  replay:\n    - effect: allow\n      role: auditor\n",
			"policy.replay[0].role"},
		{"yaml deny rule", "subjects/a.yaml",
			"name: a.b\nversion: v1\nintents: [x]\npolicy:\n  publish:\n    - effect: deny\n      unless: {principals: [p]}\n",
			"policy.publish[0].unless"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := LintFS(fstest.MapFS{tc.file: {Data: []byte(tc.data)}})
			require.NoError(t, err)
			var found *Problem
			for i := range problems {
				if problems[i].Field == tc.field {
					found = &problems[i]
				}
			}
			require.NotNil(t, found, "no problem for %s in %v", tc.field, problems)
			require.Equal(t, SeverityError, found.Severity)
			require.Equal(t, tc.file, found.File)
			require.Equal(t, "a.b", found.Subject)
			require.Contains(t, found.Message, "unknown rule field")
		})
	}
}

// JSON refuses a number with a fraction for an integer field; yaml.v3
// truncated it, so "maxAgeMs: 0.5" or "maxMessages: 0.5" became 0, which
// means no limit at all. Such a value is refused with its line, as in
// JSON; a whole number written as a float (1e3) is still that integer.
func TestYAMLFractionForIntegerIsRefused(t *testing.T) {
	base := "name: a.b\nversion: v1\nintents: [x]\n"
	for _, tc := range []struct{ name, body, line string }{
		{"replay window", "replay:\n  allowed: true\n  maxAgeMs: 0.5\n", "line 6"},
		{"retention count", "retention:\n  maxMessages: 0.9\n", "line 5"},
		{"retention bytes", "retention: {maxBytes: 1.5}\n", "line 4"},
		{"retry attempts", "delivery:\n  retry:\n    maxAttempts: 2.5\n", "line 6"},
		{"rate burst", "rateLimit: {perSecond: 1, burst: 10.5}\n", "line 4"},
		{"negative fraction", "retention:\n  messagesMs: -0.5\n", "line 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSubject("a.yaml", []byte(base+tc.body))
			require.ErrorContains(t, err, "a.yaml")
			require.ErrorContains(t, err, tc.line)
			require.ErrorContains(t, err, "integer")
			var pe *Error
			require.ErrorAs(t, err, &pe)
		})
	}
	p, err := ParseSubject("a.yaml", []byte(base+"retention: {maxMessages: 1e3, maxBytes: 2.0}\n"))
	require.NoError(t, err)
	require.Equal(t, int64(1000), p.Retention.MaxMessages)
	require.Equal(t, int64(2), p.Retention.MaxBytes)
}

// The check follows anchors, aliases and merge keys to the field they fill.
func TestYAMLFractionThroughAliasIsRefused(t *testing.T) {
	for _, body := range []string{
		"x: &n 0.5\nname: a.b\nversion: v1\nintents: [x]\nretention: {maxMessages: *n}\n",
		"x: &r {maxMessages: 0.5}\nname: a.b\nversion: v1\nintents: [x]\nretention:\n  <<: *r\n",
		"x: &r {maxBytes: 0.5}\ny: &s {auditMs: 1}\nname: a.b\nversion: v1\nintents: [x]\nretention:\n  <<: [*s, *r]\n",
	} {
		_, err := ParseSubject("a.yaml", []byte(body))
		require.ErrorContains(t, err, "not an integer", body)
	}
}

// An allow rule with no principals, roles, attributes or condition lets
// every principal do the operation. Lint warned of it for publish only,
// though a receive rule so written hands every principal the subject's
// data (a "principals" list emptied by mistake). Every operation warns.
func TestOpenAllowRuleWarnsForEveryOperation(t *testing.T) {
	for _, op := range []Operation{OpPublish, OpReceive, OpAck, OpReplay} {
		t.Run(string(op), func(t *testing.T) {
			p := SubjectPolicy{Name: "a.b", Version: "v1", Intents: []string{"x"}, Replay: ReplayPolicy{Allowed: true},
				Policy: map[Operation][]RuleSpec{
					OpPublish: {{Effect: EffectAllow, Principals: []string{"p"}}},
					op:        {{Effect: EffectAllow, Regions: []string{"uk"}}},
				}}
			var found []Problem
			for _, pr := range Lint(&Catalog{Subjects: []SubjectPolicy{p}}) {
				if pr.Field == "policy."+string(op)+"[0]" {
					found = append(found, pr)
				}
			}
			require.Len(t, found, 1)
			require.Equal(t, SeverityWarning, found[0].Severity)
			require.Contains(t, found[0].Message, "allows "+string(op)+" to every principal")
		})
	}
}

// FuzzYAMLIntegerField holds an integer field read from YAML to the number
// written: whatever scalar stands there, either the file is refused or the
// field holds exactly the number the scalar says (no truncation).
func FuzzYAMLIntegerField(f *testing.F) {
	for _, s := range []string{"0.5", "2.0", "1e3", "-0.5", "0x10", "1_000", "9.3e18", ".inf", ".nan", "7", "-1e-300", "&n 1.5", "'3'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if strings.ContainsAny(v, "\n\r#{}[],:") {
			return
		}
		p, err := ParseSubject("a.yaml", []byte("name: a.b\nversion: v1\nintents: [x]\nretention:\n  maxMessages: "+v+"\n"))
		if err != nil {
			var pe *Error
			require.ErrorAs(t, err, &pe)
			return
		}
		var n yaml.Node
		if yaml.Unmarshal([]byte(v), &n) != nil || len(n.Content) == 0 {
			return
		}
		var want float64
		if n.Content[0].Decode(&want) == nil && !math.IsNaN(want) {
			require.Equal(t, want, float64(p.Retention.MaxMessages), "scalar %q", v)
		}
	})
}
