package policy

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// requireProblem fails unless problems holds one at file and field with the
// severity and a message containing msg.
func requireProblem(t *testing.T, problems []Problem, file, field, severity, msg string) {
	t.Helper()
	for _, p := range problems {
		if p.File == file && p.Field == field && p.Severity == severity && strings.Contains(p.Message, msg) {
			return
		}
	}
	var lines []string
	for _, p := range problems {
		lines = append(lines, p.String())
	}
	require.Failf(t, "problem not reported", "want %s: %s: %s: …%s…\ngot:\n%s",
		file, field, severity, msg, strings.Join(lines, "\n"))
}

func errorsOnly(problems []Problem) []Problem {
	var out []Problem
	for _, p := range problems {
		if p.IsError() {
			out = append(out, p)
		}
	}
	return out
}

func TestLintReferenceCatalog(t *testing.T) {
	for _, dir := range []string{refCatalogDir, yamlCatalogDir} {
		problems, err := LintDir(dir)
		require.NoError(t, err, dir)
		require.Empty(t, errorsOnly(problems), "%s: %v", dir, problems)
		require.Empty(t, problems, "%s: the reference catalog is clean", dir)

		c, err := LoadDir(dir)
		require.NoError(t, err)
		require.Empty(t, Lint(c))
	}
}

// refFS returns the reference catalog as a MapFS with payments.authorize
// changed by mutate and written back as JSON.
func refFS(t *testing.T, mutate func(*SubjectPolicy)) fstest.MapFS {
	t.Helper()
	fsys := fstest.MapFS{}
	for _, f := range []string{
		"subjects/notifications.send.json",
		"schemas/payment.authorization.v1.json",
		"schemas/notification.send.v1.json",
	} {
		data, err := os.ReadFile(filepath.Join(refCatalogDir, f))
		require.NoError(t, err)
		fsys[f] = &fstest.MapFile{Data: data}
	}
	data, err := os.ReadFile(filepath.Join(refCatalogDir, "subjects/payments.authorize.json"))
	require.NoError(t, err)
	p, err := ParseSubject("payments.authorize.json", data)
	require.NoError(t, err)
	mutate(&p)
	data, err = json.MarshalIndent(p, "", "  ")
	require.NoError(t, err)
	fsys["subjects/payments.authorize.json"] = &fstest.MapFile{Data: data}
	return fsys
}

func TestLintDetectsEachProblem(t *testing.T) {
	const file = "subjects/payments.authorize.json"
	publish0 := func(p *SubjectPolicy) *RuleSpec { return &p.Policy[OpPublish][0] }
	rule := func(q QualityRule) func(*SubjectPolicy) {
		return func(p *SubjectPolicy) { p.Rules = []QualityRule{q} }
	}
	tests := []struct {
		name     string
		mutate   func(*SubjectPolicy)
		field    string
		severity string
		msg      string
	}{
		{"missing name", func(p *SubjectPolicy) { p.Name = "" }, "name", SeverityError, "name is required"},
		{"wildcard in name", func(p *SubjectPolicy) { p.Name = "payments.*" }, "name", SeverityError, "must not contain"},
		{"empty token in name", func(p *SubjectPolicy) { p.Name = "payments..authorize" }, "name", SeverityError, "empty dot-separated token"},
		{"missing version", func(p *SubjectPolicy) { p.Version = "" }, "version", SeverityError, "version is required"},
		{"@ in version", func(p *SubjectPolicy) { p.Version = "v1@2" }, "version", SeverityError, "must not contain '@'"},
		{"bad mode", func(p *SubjectPolicy) { p.Mode = "fanout" }, "mode", SeverityError, `mode is "fanout"; must be "pubsub", "workQueue" or "requestReply"`},
		{"empty mode", func(p *SubjectPolicy) { p.Mode = "" }, "mode", SeverityWarning, `defaults to "pubsub"`},
		{"no intents", func(p *SubjectPolicy) { p.Intents = nil }, "intents", SeverityError, "at least one intent"},
		{"overflowing ackWaitMs", func(p *SubjectPolicy) { p.Delivery.AckWaitMs = 9223372036855 }, "delivery.ackWaitMs", SeverityError, "out of range"},
		{"overflowing maxAgeMs", func(p *SubjectPolicy) { p.Replay.MaxAgeMs = 1 << 62 }, "replay.maxAgeMs", SeverityError, "out of range"},
		{"empty intent", func(p *SubjectPolicy) { p.Intents = append(p.Intents, " ") }, "intents[1]", SeverityError, "entry is empty"},
		{"repeated intent", func(p *SubjectPolicy) { p.Intents = append(p.Intents, p.Intents[0]) }, "intents[1]", SeverityWarning, "listed twice"},
		{"unknown schema", func(p *SubjectPolicy) { p.Schema.Name = "payment.authorization.v9" }, "schema.name", SeverityError, `unknown schema "payment.authorization.v9"`},
		{"schema without name", func(p *SubjectPolicy) { p.Schema.Name = "" }, "schema.name", SeverityError, "schema.name is required"},
		{"no schema", func(p *SubjectPolicy) { p.Schema = nil }, "schema", SeverityWarning, "not validated"},
		{"odd compatibility", func(p *SubjectPolicy) { p.Schema.Compatibility = "sideways" }, "schema.compatibility", SeverityWarning, `"sideways"`},
		{"bad crossRegion", func(p *SubjectPolicy) { p.RegionPolicy.CrossRegion = "maybe" }, "regionPolicy.crossRegion", SeverityError, `must be "allow" or "deny"`},
		{"home outside allowed", func(p *SubjectPolicy) { p.RegionPolicy.Home = "us" }, "regionPolicy.home", SeverityWarning, "not in allowedRegions"},
		{"empty allowed region", func(p *SubjectPolicy) { p.RegionPolicy.AllowedRegions = []string{"uk", ""} }, "regionPolicy.allowedRegions[1]", SeverityError, "entry is empty"},
		{"negative maxAttempts", func(p *SubjectPolicy) { p.Delivery.Retry.MaxAttempts = -1 }, "delivery.retry.maxAttempts", SeverityError, "must not be negative"},
		{"bad backoff", func(p *SubjectPolicy) { p.Delivery.Retry.Backoff = "random" }, "delivery.retry.backoff", SeverityError, `must be "fixed", "exponential" or "linear"`},
		{"negative maxDelayMs", func(p *SubjectPolicy) { p.Delivery.Retry.MaxDelayMs = -5 }, "delivery.retry.maxDelayMs", SeverityError, "got -5"},
		{"negative ttlMs", func(p *SubjectPolicy) { p.Delivery.Idempotency.TTLMs = -1 }, "delivery.idempotency.ttlMs", SeverityError, "must not be negative"},
		{"idempotency key path malformed", func(p *SubjectPolicy) { p.Delivery.Idempotency.Key = "data.order..id" }, "delivery.idempotency.key", SeverityError, "malformed"},
		{"idempotency key unknown", func(p *SubjectPolicy) { p.Delivery.Idempotency.Key = "requestId" }, "delivery.idempotency.key", SeverityWarning, "envelope's idempotencyKey is used"},
		{"negative ackWaitMs", func(p *SubjectPolicy) { p.Delivery.AckWaitMs = -1 }, "delivery.ackWaitMs", SeverityError, "must not be negative"},
		{"negative replay maxAgeMs", func(p *SubjectPolicy) { p.Replay.MaxAgeMs = -1 }, "replay.maxAgeMs", SeverityError, "must not be negative"},
		{"negative retention", func(p *SubjectPolicy) { p.Retention.AuditMs = -1 }, "retention.auditMs", SeverityError, "must not be negative"},
		{"negative maxMessages", func(p *SubjectPolicy) { p.Retention.MaxMessages = -1 }, "retention.maxMessages", SeverityError, "maxMessages must not be negative (got -1)"},
		{"negative maxBytes", func(p *SubjectPolicy) { p.Retention.MaxBytes = -1 }, "retention.maxBytes", SeverityError, "maxBytes must not be negative (got -1)"},
		{"no classification", func(p *SubjectPolicy) { p.Data.Classification = "" }, "data.classification", SeverityWarning, "no classification"},
		{"bad encryption", func(p *SubjectPolicy) { p.Data.Encryption = "aes" }, "data.encryption", SeverityError, `must be "required" or "optional"`},
		{"bad tokenization", func(p *SubjectPolicy) { p.Data.Tokenization = "yes" }, "data.tokenization", SeverityError, `must be "required" or "optional"`},
		{"empty forbidden field", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{""} }, "data.forbiddenFields[0]", SeverityError, "field path is empty"},
		{"forbidden field with empty segment", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card..pan"} }, "data.forbiddenFields[0]", SeverityError, "malformed"},
		{"forbidden field with trailing dot", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card.pan", "card."} }, "data.forbiddenFields[1]", SeverityError, "malformed"},
		{"forbidden field with space", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card pan"} }, "data.forbiddenFields[0]", SeverityError, "malformed"},
		{"forbidden field wildcard", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card.*"} }, "data.forbiddenFields[0]", SeverityError, "malformed"},
		{"forbidden field repeated", func(p *SubjectPolicy) { p.Data.ForbiddenFields = []string{"card.pan", "card.pan"} }, "data.forbiddenFields[1]", SeverityWarning, "listed twice"},
		{"empty tokenized field", func(p *SubjectPolicy) { p.Data.TokenizedFields = []string{"paymentToken", ""} }, "data.tokenizedFields[1]", SeverityError, "field path is empty"},
		{"malformed tokenized field", func(p *SubjectPolicy) { p.Data.TokenizedFields = []string{".paymentToken"} }, "data.tokenizedFields[0]", SeverityError, "malformed"},
		{"malformed routing field", func(p *SubjectPolicy) { p.Data.RoutingFields = []string{"a[0]"} }, "data.routingFields[0]", SeverityError, "malformed"},
		{"routing field is forbidden", func(p *SubjectPolicy) { p.Data.RoutingFields = []string{"card.pan"} }, "data.routingFields[0]", SeverityError, "cannot stay in clear"},
		{"bad effect", func(p *SubjectPolicy) { publish0(p).Effect = "permit" }, "policy.publish[0].effect", SeverityError, `effect must be "allow" or "deny" (got "permit")`},
		{"missing effect", func(p *SubjectPolicy) { p.Policy[OpReceive][0].Effect = "" }, "policy.receive[0].effect", SeverityError, `effect must be "allow" or "deny"`},
		{"unknown operation", func(p *SubjectPolicy) { p.Policy["subscribe"] = []RuleSpec{{Effect: EffectAllow}} }, "policy.subscribe", SeverityError, `unknown operation "subscribe"`},
		{"empty principal", func(p *SubjectPolicy) { publish0(p).Principals = []string{""} }, "policy.publish[0].principals[0]", SeverityError, "entry is empty"},
		{"empty role", func(p *SubjectPolicy) { publish0(p).Roles = []string{""} }, "policy.publish[0].roles[0]", SeverityError, "entry is empty"},
		{"empty attribute name", func(p *SubjectPolicy) { publish0(p).Attributes = map[string]string{"": "x"} }, "policy.publish[0].attributes", SeverityError, "attribute name is empty"},
		{"rule intent not on subject", func(p *SubjectPolicy) { publish0(p).Intents = []string{"refund"} }, "policy.publish[0].intents[0]", SeverityWarning, "never matches"},
		{"rule region not allowed", func(p *SubjectPolicy) { publish0(p).Regions = []string{"us"} }, "policy.publish[0].regions[0]", SeverityWarning, "not in regionPolicy.allowedRegions"},
		{"publish open to all", func(p *SubjectPolicy) { publish0(p).Principals = nil }, "policy.publish[0]", SeverityWarning, "every principal"},
		{"when wrong type", func(p *SubjectPolicy) { publish0(p).When = "principal.id == 1" }, "policy.publish[0].when", SeverityError, "1:14: found no matching overload for '_==_' applied to '(string, int)'"},
		{"when unknown variable", func(p *SubjectPolicy) { p.Policy[OpAck][0].When = `user.id == "x"` }, "policy.ack[0].when", SeverityError, "undeclared reference to 'user'"},
		{"when unknown field", func(p *SubjectPolicy) { publish0(p).When = `message.tenant == "x"` }, "policy.publish[0].when", SeverityError, "undefined field 'tenant'"},
		{"when not bool", func(p *SubjectPolicy) { publish0(p).When = "message.data.amount" }, "policy.publish[0].when", SeverityError, "want bool"},
		{"when syntax", func(p *SubjectPolicy) { publish0(p).When = "message.data.amount <" }, "policy.publish[0].when", SeverityError, "Syntax error"},
		{"nobody may publish", func(p *SubjectPolicy) { publish0(p).Effect = EffectDeny }, "policy.publish", SeverityWarning, "nobody can publish"},
		{"no publish rules", func(p *SubjectPolicy) { delete(p.Policy, OpPublish) }, "policy.publish", SeverityWarning, "nobody can publish"},
		{"replay allowed without rule", func(p *SubjectPolicy) { p.Replay.Allowed = true }, "policy.replay", SeverityWarning, "no rule allows replay"},
		{"replay rule while not allowed", func(p *SubjectPolicy) {
			p.Policy[OpReplay] = []RuleSpec{{Effect: EffectAllow, Principals: []string{"p"}}}
		}, "policy.replay", SeverityWarning, "replay.allowed is false"},
		{"rate zero", func(p *SubjectPolicy) { p.RateLimit = &RateLimitPolicy{PerSecond: 0, Burst: 1} }, "rateLimit.perSecond", SeverityError, "positive"},
		{"rate negative", func(p *SubjectPolicy) { p.RateLimit = &RateLimitPolicy{PerSecond: -2, Burst: 1} }, "rateLimit.perSecond", SeverityError, "got -2"},
		{"burst zero", func(p *SubjectPolicy) { p.RateLimit = &RateLimitPolicy{PerSecond: 10} }, "rateLimit.burst", SeverityError, "at least 1"},
		{"quality rule without name", rule(QualityRule{Expr: "true"}), "rules[0].name", SeverityError, "name is required"},
		{"quality rule without expr", rule(QualityRule{Name: "x"}), "rules[0].expr", SeverityError, "expr is required"},
		{"quality rule CEL error", rule(QualityRule{Name: "x", Expr: "message.data.amount > 'a' +"}), "rules[0].expr", SeverityError, "Syntax error"},
		{"quality rule not bool", rule(QualityRule{Name: "x", Expr: "size(message.id)"}), "rules[0].expr", SeverityError, "result is int, want bool"},
		{"quality rule bad onFailure", rule(QualityRule{Name: "x", Expr: "true", OnFailure: "drop"}), "rules[0].onFailure", SeverityError, `must be "deny" or "quarantine"`},
		{"quality rule bad code", rule(QualityRule{Name: "x", Expr: "true", Code: "bad code"}), "rules[0].code", SeverityError, "upper-case"},
		{"quality rule names repeat", func(p *SubjectPolicy) {
			p.Rules = []QualityRule{{Name: "x", Expr: "true"}, {Name: "x", Expr: "false"}}
		}, "rules[1].name", SeverityError, `"x" is used twice`},
		{"bad signature", func(p *SubjectPolicy) { p.Integrity.Signature = "always" }, "integrity.signature", SeverityError, `must be "required" or "optional"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems, err := LintFS(refFS(t, tt.mutate))
			require.NoError(t, err)
			requireProblem(t, problems, file, tt.field, tt.severity, tt.msg)
			for _, p := range errorsOnly(problems) {
				require.Equal(t, file, p.File, "only the mutated file has errors: %v", p)
			}
		})
	}
}

func TestLintAcceptsValidExtensions(t *testing.T) {
	problems, err := LintFS(refFS(t, func(p *SubjectPolicy) {
		p.Data.Encryption = "optional"
		p.Data.TokenizedFields = []string{"paymentToken"}
		p.Data.RoutingFields = []string{"merchantId"}
		p.Integrity.Signature = "optional"
		p.Delivery.Retry.Backoff = "linear"
		p.Delivery.AckWaitMs = 30000
		p.Retention.MaxMessages = 1000000
		p.Retention.MaxBytes = 1 << 30
		p.Delivery.Idempotency.Key = "data.orderId"
		p.RateLimit = &RateLimitPolicy{PerSecond: 0.5, Burst: 1}
		p.Replay = ReplayPolicy{Allowed: true, RequireReason: true, MaxAgeMs: 86400000}
		p.Policy[OpReplay] = []RuleSpec{{Effect: EffectAllow, Roles: []string{"ops"}, RequireReason: true}}
		p.Policy[OpPublish] = append([]RuleSpec{{Effect: EffectDeny, Attributes: map[string]string{"suspended": "true"}}},
			p.Policy[OpPublish]...)
		p.Policy[OpPublish][1].When = `message.data.amount < 10000 && principal.attributes.team == "payments"`
		p.Rules = []QualityRule{
			{Name: "currency", Expr: `message.data.currency in ["GBP", "EUR"]`},
			{Name: "amount", Expr: `has(message.data.amount) && message.data.amount > 0`, OnFailure: "quarantine", Code: "AMOUNT_INVALID"},
		}
	}))
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestLintReportsEveryProblem(t *testing.T) {
	problems, err := LintFS(refFS(t, func(p *SubjectPolicy) {
		p.Version = ""
		p.Mode = "broadcast"
		p.Intents = nil
		p.Schema.Name = "missing"
		p.Policy[OpPublish][0].Effect = "maybe"
		p.Policy[OpPublish][0].When = "nope"
		p.RateLimit = &RateLimitPolicy{}
		p.Data.Encryption = "rot13"
	}))
	require.NoError(t, err)
	errs := errorsOnly(problems)
	fields := make([]string, 0, len(errs))
	for _, p := range errs {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{
		"version", "mode", "intents", "schema.name", "data.encryption",
		"policy.publish[0].effect", "policy.publish[0].when",
		"rateLimit.perSecond", "rateLimit.burst",
	}, fields)
}

func TestLintSchemas(t *testing.T) {
	fsys := refFS(t, func(*SubjectPolicy) {})
	fsys["schemas/payment.authorization.v1.json"] = &fstest.MapFile{Data: []byte(`{"type": "objekt"}`)}
	fsys["schemas/spare.yaml"] = &fstest.MapFile{Data: []byte("type: string\n")}
	problems, err := LintFS(fsys)
	require.NoError(t, err)
	requireProblem(t, problems, "schemas/payment.authorization.v1.json", "", SeverityError, `schema "payment.authorization.v1" does not compile`)
	requireProblem(t, problems, "schemas/spare.yaml", "", SeverityWarning, "not used by any subject")
	require.Len(t, problems, 2)
}

func TestLintInMemoryCatalog(t *testing.T) {
	a := SubjectPolicy{Name: "a.b", Version: "v1", Mode: ModePubSub, Intents: []string{"x"},
		Data:   DataPolicy{Classification: "internal"},
		Policy: map[Operation][]RuleSpec{OpPublish: {{Effect: EffectAllow, Principals: []string{"p"}}}}}
	c := &Catalog{
		Subjects: []SubjectPolicy{a, a},
		Schemas:  map[string][]byte{"loose": []byte(`{"type": 5}`)},
	}
	problems := Lint(c)
	requireProblem(t, problems, "", "name", SeverityError, `subject "a.b" is also defined by subject #1`)
	requireProblem(t, problems, "", "schemas.loose", SeverityError, "does not compile")
	for _, p := range problems {
		if p.Field == "name" {
			require.Equal(t, `subject a.b: name: error: subject "a.b" is also defined by subject #1`, p.String())
		}
	}

	require.Equal(t, []Problem{{Severity: SeverityError, Message: "no catalog"}}, Lint(nil))
	require.Equal(t, "catalog: error: no catalog", Lint(nil)[0].String())

	// Non-finite rates cannot come from JSON but can be built in code or YAML.
	a.RateLimit = &RateLimitPolicy{PerSecond: math.Inf(1), Burst: 1}
	requireProblem(t, Lint(&Catalog{Subjects: []SubjectPolicy{a}}), "", "rateLimit.perSecond", SeverityError, "positive")
	a.RateLimit = &RateLimitPolicy{PerSecond: math.NaN(), Burst: 1}
	requireProblem(t, Lint(&Catalog{Subjects: []SubjectPolicy{a}}), "", "rateLimit.perSecond", SeverityError, "positive")
}

func TestProblemString(t *testing.T) {
	for _, tt := range []struct {
		p    Problem
		want string
	}{
		{Problem{File: "subjects/x.json", Subject: "x", Field: "policy.publish[0].effect", Severity: SeverityError,
			Message: `effect must be "allow" or "deny"`},
			`subjects/x.json: policy.publish[0].effect: error: effect must be "allow" or "deny"`},
		{Problem{File: "schemas/s.json", Severity: SeverityWarning, Message: "unused"}, "schemas/s.json: warning: unused"},
		{Problem{Subject: "x", Field: "mode", Severity: SeverityWarning, Message: "m"}, "subject x: mode: warning: m"},
	} {
		require.Equal(t, tt.want, tt.p.String())
	}
	require.True(t, Problem{Severity: SeverityError}.IsError())
	require.False(t, Problem{Severity: SeverityWarning}.IsError())
}

// FuzzParseSubjectPolicy feeds JSON and YAML documents to the parser: it
// must never panic, and Lint must never panic on whatever parses.
func FuzzParseSubject(f *testing.F) {
	for _, dir := range []string{refCatalogDir + "/subjects", yamlCatalogDir + "/subjects"} {
		entries, err := os.ReadDir(dir)
		require.NoError(f, err)
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(f, err)
			f.Add(strings.TrimPrefix(filepath.Ext(e.Name()), "."), data)
		}
	}
	f.Add("yaml", []byte("name: a\nrules: [{name: r, expr: 'message.data.x > 1', onFailure: deny}]\npolicy: {publish: [{effect: allow, when: 'principal.id == \"x\"'}]}\n"))
	f.Add("json", []byte(`{"name":"a","rateLimit":{"perSecond":1,"burst":1},"data":{"forbiddenFields":["a..b"]}}`))
	f.Add("yml", []byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, ext string, data []byte) {
		p, err := ParseSubject("fuzz."+ext, data)
		if err != nil {
			var pe *Error
			require.ErrorAs(t, err, &pe)
			return
		}
		// Schema compilation and LintFS are left out: they add nothing the
		// parser can reach, and their map-ordered code paths stall the
		// fuzzer's coverage tracking.
		problems := Lint(&Catalog{Subjects: []SubjectPolicy{p}})
		for _, pr := range problems {
			if pr.Severity != SeverityError && pr.Severity != SeverityWarning {
				t.Fatalf("bad severity: %v", pr)
			}
		}
	})
}
