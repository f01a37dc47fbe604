package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

const (
	// refCatalogDir is the reference catalog as the demo package embeds it.
	refCatalogDir  = "../demo/policies"
	yamlCatalogDir = "testdata/yaml-policies"
	// sharedCatalogDir is the reference catalog as shipped beside the repo.
	sharedCatalogDir = "../../shared/reference/pigeonmq-policies"
)

// wantPaymentsAuthorize is payments.authorize exactly as the reference
// catalog defines it.
func wantPaymentsAuthorize() SubjectPolicy {
	ukEU := []string{"uk", "eu"}
	return SubjectPolicy{
		Name:    "payments.authorize",
		Version: "v1",
		Mode:    ModeRequestReply,
		Intents: []string{"authorize_payment"},
		Schema:  &SchemaRef{Name: "payment.authorization.v1", Compatibility: "backward"},
		RegionPolicy: RegionPolicy{
			Home: "uk", AllowedRegions: ukEU, CrossRegion: "deny",
		},
		Delivery: DeliveryPolicy{
			Retry:       RetryPolicy{MaxAttempts: 3, Backoff: "exponential", MaxDelayMs: 30000},
			Idempotency: IdempotencyPolicy{Required: true, Key: "idempotencyKey", TTLMs: 172800000},
		},
		Replay:    ReplayPolicy{Allowed: false},
		Retention: RetentionPolicy{MessagesMs: 604800000, AuditMs: 220752000000},
		Data: DataPolicy{
			Classification: "pci", Encryption: "required", Tokenization: "required",
			ForbiddenFields: []string{"card.pan"},
		},
		Quarantine: QuarantinePolicy{OnSchemaViolation: true, OnPolicyViolation: true, OnHandlerFailure: true},
		Policy: map[Operation][]RuleSpec{
			OpPublish: {{Effect: EffectAllow, Principals: []string{"spiffe://merchant-prod/ns/checkout/sa/checkout-api"},
				Intents: []string{"authorize_payment"}, Regions: ukEU}},
			OpReceive: {{Effect: EffectAllow, Principals: []string{"spiffe://merchant-prod/ns/payments/sa/gateway-adapter"},
				Regions: ukEU}},
			OpAck: {{Effect: EffectAllow, Principals: []string{"spiffe://merchant-prod/ns/payments/sa/gateway-adapter"},
				Regions: ukEU}},
			OpReplay: {},
		},
	}
}

// wantNotificationsSend is notifications.send exactly as the reference
// catalog defines it.
func wantNotificationsSend() SubjectPolicy {
	ukEU := []string{"uk", "eu"}
	worker := []string{"spiffe://merchant-prod/ns/notify/sa/notifier-worker"}
	return SubjectPolicy{
		Name:    "notifications.send",
		Version: "v1",
		Mode:    ModeWorkQueue,
		Intents: []string{"send_notification"},
		Schema:  &SchemaRef{Name: "notification.send.v1", Compatibility: "backward"},
		RegionPolicy: RegionPolicy{
			Home: "uk", AllowedRegions: ukEU, CrossRegion: "deny",
		},
		Delivery: DeliveryPolicy{
			Retry:       RetryPolicy{MaxAttempts: 5, Backoff: "exponential", MaxDelayMs: 60000},
			Idempotency: IdempotencyPolicy{Required: true, Key: "idempotencyKey", TTLMs: 86400000},
		},
		Replay:     ReplayPolicy{Allowed: true},
		Retention:  RetentionPolicy{MessagesMs: 259200000, AuditMs: 220752000000},
		Data:       DataPolicy{Classification: "pii", Encryption: "required", ForbiddenFields: []string{"recipient.ssn"}},
		Quarantine: QuarantinePolicy{OnSchemaViolation: true, OnPolicyViolation: true, OnHandlerFailure: true},
		Policy: map[Operation][]RuleSpec{
			OpPublish: {{Effect: EffectAllow, Principals: []string{"spiffe://merchant-prod/ns/orders/sa/orders-api"},
				Intents: []string{"send_notification"}, Regions: ukEU}},
			OpReceive: {{Effect: EffectAllow, Principals: worker, Regions: ukEU}},
			OpAck:     {{Effect: EffectAllow, Principals: worker, Regions: ukEU}},
			OpReplay: {{Effect: EffectAllow, Principals: []string{"spiffe://merchant-prod/ns/ops/sa/notify-replay"},
				Regions: ukEU, RequireReason: true}},
		},
	}
}

func TestLoadDirReference(t *testing.T) {
	c, err := LoadDir(refCatalogDir)
	require.NoError(t, err)

	require.Equal(t, []SubjectPolicy{wantNotificationsSend(), wantPaymentsAuthorize()}, c.Subjects)
	require.Equal(t, "payments.authorize@v1", c.Subjects[1].PolicyID())

	require.Len(t, c.Schemas, 2)
	for name, file := range map[string]string{
		"payment.authorization.v1": "schemas/payment.authorization.v1.json",
		"notification.send.v1":     "schemas/notification.send.v1.json",
	} {
		raw, err := os.ReadFile(filepath.Join(refCatalogDir, file))
		require.NoError(t, err)
		require.Equal(t, raw, c.Schemas[name], "JSON schemas are kept byte for byte")
		require.Equal(t, file, c.Sources.Schemas[name])
	}
	require.Equal(t, map[string]string{
		"payments.authorize": "subjects/payments.authorize.json",
		"notifications.send": "subjects/notifications.send.json",
	}, c.Sources.Subjects)
}

func TestLoadYAMLEqualsJSON(t *testing.T) {
	js, err := LoadDir(refCatalogDir)
	require.NoError(t, err)
	ys, err := LoadDir(yamlCatalogDir)
	require.NoError(t, err)

	require.Equal(t, js.Subjects, ys.Subjects)
	require.Len(t, ys.Schemas, len(js.Schemas))
	for name, want := range js.Schemas {
		require.Contains(t, ys.Schemas, name)
		require.JSONEq(t, string(want), string(ys.Schemas[name]), name)
	}
	require.Equal(t, "subjects/payments.authorize.yaml", ys.Sources.Subjects["payments.authorize"])
	require.Equal(t, "schemas/notification.send.v1.yml", ys.Sources.Schemas["notification.send.v1"])
}

// TestReferenceCatalogCopyIsCurrent keeps testdata in step with the shared
// reference catalog when that folder is present beside the module.
func TestReferenceCatalogCopyIsCurrent(t *testing.T) {
	if _, err := os.Stat(sharedCatalogDir); err != nil {
		t.Skipf("%s not present: %v", sharedCatalogDir, err)
	}
	for _, file := range []string{
		"subjects/payments.authorize.json",
		"subjects/notifications.send.json",
		"schemas/payment.authorization.v1.json",
		"schemas/notification.send.v1.json",
	} {
		want, err := os.ReadFile(filepath.Join(sharedCatalogDir, file))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(refCatalogDir, file))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), file)
	}
	shared, err := LoadDir(sharedCatalogDir)
	require.NoError(t, err)
	local, err := LoadDir(refCatalogDir)
	require.NoError(t, err)
	require.Equal(t, local, shared)
}

func TestLoadFS(t *testing.T) {
	subject := []byte(`{"name":"a.b","version":"v1","mode":"pubsub","intents":["x"]}`)
	fsys := fstest.MapFS{
		"subjects/a.b.json":    {Data: subject},
		"subjects/.hidden":     {Data: []byte("not read")},
		"subjects/README.md":   {Data: []byte("# notes")},
		"subjects/old/x.json":  {Data: []byte("{")},
		"schemas/s.yaml":       {Data: []byte("type: object\nproperties:\n  n: {type: integer}\n")},
		"schemas/.editorlock#": {Data: []byte("")},
	}
	c, err := LoadFS(fsys)
	require.NoError(t, err)
	require.Len(t, c.Subjects, 1)
	require.Equal(t, "a.b", c.Subjects[0].Name)
	require.JSONEq(t, `{"type":"object","properties":{"n":{"type":"integer"}}}`, string(c.Schemas["s"]))

	problems, err := LintFS(fsys)
	require.NoError(t, err)
	requireProblem(t, problems, "subjects/README.md", "", SeverityWarning, "file ignored")
	requireProblem(t, problems, "subjects/old", "", SeverityWarning, "directory ignored")

	// A catalog without schemas/ is fine; one without subjects/ is not.
	_, err = LoadFS(fstest.MapFS{"subjects/a.b.json": {Data: subject}})
	require.NoError(t, err)
	_, err = LoadFS(fstest.MapFS{"schemas/s.json": {Data: []byte(`{}`)}})
	require.ErrorContains(t, err, "subjects: missing directory")
	var pe *Error
	require.ErrorAs(t, err, &pe)
}

func TestLoadErrors(t *testing.T) {
	good := `{"name":"a.b","version":"v1","mode":"pubsub","intents":["x"]}`
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
		line  int      // expected Details["line"], 0 to skip
	}{
		{
			name:  "json syntax error with line and column",
			files: map[string]string{"subjects/bad.json": "{\n  \"name\": \"a.b\",\n  \"version\" \"v1\"\n}"},
			want:  []string{"subjects/bad.json: line 3, column 13: invalid character '\"' after object key"},
			line:  3,
		},
		{
			name:  "json type error names the field",
			files: map[string]string{"subjects/bad.json": "{\"name\": \"a.b\",\n \"replay\": {\"maxAgeMs\": \"soon\"}}"},
			want:  []string{"subjects/bad.json: line 2", "replay.maxAgeMs: cannot use a JSON string as an integer"},
			line:  2,
		},
		{
			name:  "json truncated",
			files: map[string]string{"subjects/bad.json": `{"name": "a.b", "intents": [`},
			want:  []string{"subjects/bad.json: line 1", "unexpected end of JSON input"},
		},
		{
			name:  "json trailing data",
			files: map[string]string{"subjects/bad.json": good + "\n{}"},
			want:  []string{"subjects/bad.json: line 2", "unexpected data after the top-level value"},
			line:  2,
		},
		{
			// encoding/json would keep the last effect; a reviewer reads
			// the first, and YAML refuses the file.
			name: "json member named twice",
			files: map[string]string{"subjects/bad.json": `{"name":"a.b","version":"v1","mode":"pubsub","intents":["x"],` +
				"\n" + `"policy":{"publish":[{"effect":"deny","principals":["*"],"effect":"allow"}]}}`},
			want: []string{`subjects/bad.json: line 2, column 58: the object at "/policy/publish/0" has two members of one name`},
			line: 2,
		},
		{
			name:  "json member named twice, once escaped",
			files: map[string]string{"subjects/bad.json": `{"name":"a.b","\u006eame":"c.d"}`},
			want:  []string{`subjects/bad.json: line 1`, `the object at "/" has two members of one name`},
			line:  1,
		},
		{
			// encoding/json would fill forbiddenFields from the second
			// member and empty the list a reviewer reads in the first.
			name:  "json member named as a field in another case",
			files: map[string]string{"subjects/bad.json": `{"name":"a.b","data":{"forbiddenFields":["card.pan"],"ForbiddenFields":[]}}`},
			want:  []string{`subjects/bad.json: member "/data/ForbiddenFields" differs from "forbiddenFields" only in case`},
		},
		{
			name:  "json member in another case alone",
			files: map[string]string{"subjects/bad.json": `{"Name":"a.b","version":"v1"}`},
			want:  []string{`subjects/bad.json: member "/Name" differs from "name" only in case`},
		},
		{
			name:  "json string not UTF-8",
			files: map[string]string{"subjects/bad.json": "{\"name\":\"a.b\",\"intents\":[\"\xff\"]}"},
			want:  []string{"subjects/bad.json: line 1", "not valid UTF-8"},
			line:  1,
		},
		{
			name:  "json empty",
			files: map[string]string{"subjects/bad.json": "  \n"},
			want:  []string{"subjects/bad.json: empty file"},
		},
		{
			name:  "json not an object",
			files: map[string]string{"subjects/bad.json": `null`},
			want:  []string{"subjects/bad.json: a subject policy must be an object"},
		},
		{
			name:  "yaml syntax error",
			files: map[string]string{"subjects/bad.yaml": "name: a.b\nversion: v1\n  mode: pubsub\n"},
			want:  []string{"subjects/bad.yaml: line 3: mapping values are not allowed"},
			line:  3,
		},
		{
			name:  "yaml type error",
			files: map[string]string{"subjects/bad.yml": "name: a.b\nintents: x\nretention:\n  messagesMs: [1]\n"},
			want:  []string{"subjects/bad.yml: line 2: cannot unmarshal !!str `x` into []string", "line 4"},
			line:  2,
		},
		{
			name:  "yaml two documents",
			files: map[string]string{"subjects/bad.yaml": "name: a.b\n---\nname: c.d\n"},
			want:  []string{"subjects/bad.yaml: more than one YAML document"},
		},
		{
			name:  "yaml empty",
			files: map[string]string{"subjects/bad.yaml": "# nothing\n"},
			want:  []string{"subjects/bad.yaml: empty file"},
		},
		{
			name: "duplicate subject across files",
			files: map[string]string{
				"subjects/a.json": good,
				"subjects/b.yaml": "name: a.b\nversion: v2\n",
			},
			want: []string{`subjects/b.yaml: subject "a.b" is already defined in subjects/a.json`},
		},
		{
			name: "duplicate schema across extensions",
			files: map[string]string{
				"subjects/a.json": good,
				"schemas/s.json":  `{}`,
				"schemas/s.yaml":  "type: object\n",
			},
			want: []string{`schemas/s.yaml: schema "s" is already defined in schemas/s.json`},
		},
		{
			name: "schema that is not JSON",
			files: map[string]string{
				"subjects/a.json": good,
				"schemas/s.json":  "{\n\"type\": object}",
			},
			want: []string{"schemas/s.json: line 2, column 9: invalid character 'o'"},
			line: 2,
		},
		{
			name: "schema with a member named twice",
			files: map[string]string{
				"subjects/a.json": good,
				"schemas/s.json":  `{"type":"object","required":["amount"],"required":[]}`,
			},
			want: []string{`schemas/s.json: line 1`, `the object at "/" has two members of one name`},
			line: 1,
		},
		{
			name: "yaml schema that cannot become JSON",
			files: map[string]string{
				"subjects/a.json": good,
				"schemas/s.yaml":  "maximum: .inf\n",
			},
			want: []string{"schemas/s.yaml: cannot convert to JSON"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tt.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			_, err := LoadFS(fsys)
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			var pe *Error
			require.ErrorAs(t, err, &pe)
			if tt.line != 0 {
				require.Equal(t, tt.line, pe.Line)
			}

			// LintFS returns a catalog that does not load as its error.
			_, lintErr := LintFS(fsys)
			require.Equal(t, err.Error(), lintErr.Error())
		})
	}
}

func TestLoadDirErrorNamesPath(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "subjects"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "subjects", "x.json"), []byte("{,}"), 0o644))
	_, err := LoadDir(dir)
	require.ErrorContains(t, err, filepath.Join(dir, "subjects", "x.json")+": line 1, column 2")
	_, err = LintDir(dir)
	require.ErrorContains(t, err, "subjects/x.json: line 1, column 2")

	_, err = LoadDir(filepath.Join(dir, "nope"))
	require.ErrorContains(t, err, "missing directory")
}

func TestParseSubjectFormats(t *testing.T) {
	jsonDoc := []byte(`{"name": "a.b", "version": "v1", "intents": ["x"]}`)
	yamlDoc := []byte("name: a.b\nversion: v1\nintents: [x]\n")
	want := SubjectPolicy{Name: "a.b", Version: "v1", Intents: []string{"x"}}
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"a.json", jsonDoc},
		{"A.JSON", jsonDoc},
		{"a.yaml", yamlDoc},
		{"a.yml", yamlDoc},
		{"a.yaml", jsonDoc}, // YAML is a superset of JSON
		{"a", jsonDoc},      // no extension: sniffed
		{"a", yamlDoc},
		{"a.txt", yamlDoc},
	} {
		p, err := ParseSubject(tt.name, tt.data)
		require.NoError(t, err, tt.name)
		require.Equal(t, want, p, tt.name)
	}

	// YAML under a .json name is parsed as JSON and fails.
	_, err := ParseSubject("a.json", yamlDoc)
	require.ErrorContains(t, err, "a.json: line 1, column 2: invalid character 'a'")
}

func TestParseSubjectExtensions(t *testing.T) {
	doc := `name: orders.created
version: "2"
mode: pubsub
intents: [record_order]
rateLimit: {perSecond: 50.5, burst: 100}
integrity: {signature: required}
delivery:
  ackWaitMs: 15000
replay: {allowed: true, requireReason: true, maxAgeMs: 3600000}
retention: {messagesMs: 86400000, maxMessages: 50000, maxBytes: 1048576}
data:
  classification: internal
  tokenizedFields: [paymentToken]
  routingFields: [region, tenant.id]
rules:
  - name: positive-amount
    expr: message.data.amount > 0
    onFailure: quarantine
    code: AMOUNT_NOT_POSITIVE
policy:
  publish:
    - effect: deny
      roles: [suspended]
    - effect: allow
      roles: [writer]
      attributes: {team: orders}
      when: message.data.amount < 10000
`
	p, err := ParseSubject("orders.created.yaml", []byte(doc))
	require.NoError(t, err)
	require.Equal(t, &RateLimitPolicy{PerSecond: 50.5, Burst: 100}, p.RateLimit)
	require.Equal(t, IntegrityPolicy{Signature: "required"}, p.Integrity)
	require.Equal(t, int64(15000), p.Delivery.AckWaitMs)
	require.Equal(t, ReplayPolicy{Allowed: true, RequireReason: true, MaxAgeMs: 3600000}, p.Replay)
	require.Equal(t, RetentionPolicy{MessagesMs: 86400000, MaxMessages: 50000, MaxBytes: 1048576}, p.Retention)
	require.Equal(t, []string{"paymentToken"}, p.Data.TokenizedFields)
	require.Equal(t, []string{"region", "tenant.id"}, p.Data.RoutingFields)
	require.Equal(t, []QualityRule{{Name: "positive-amount", Expr: "message.data.amount > 0",
		OnFailure: "quarantine", Code: "AMOUNT_NOT_POSITIVE"}}, p.Rules)
	require.Equal(t, []RuleSpec{
		{Effect: EffectDeny, Roles: []string{"suspended"}},
		{Effect: EffectAllow, Roles: []string{"writer"}, Attributes: map[string]string{"team": "orders"},
			When: "message.data.amount < 10000"},
	}, p.Policy[OpPublish])

	problems := Lint(&Catalog{Subjects: []SubjectPolicy{p}})
	require.Empty(t, errorsOnly(problems), "%v", problems)
}

func TestUnknownFieldsAreWarnings(t *testing.T) {
	for _, tt := range []struct {
		file, data string
		want       []string
	}{
		{
			file: "subjects/a.json",
			data: `{"name":"a.b","version":"v1","intents":["x"],"colour":"red",
				"policy":{"publish":[{"effect":"allow","principals":["p"]}]},"delivery":{"ackWaitMsec":5}}`,
			want: []string{"colour", "delivery.ackWaitMsec"},
		},
		{
			file: "subjects/a.yaml",
			data: "name: a.b\nversion: v1\nflavour: v1\nintents: [x]\nretention: {maxMesages: 5}\n",
			want: []string{"flavour", "retention.maxMesages"},
		},
	} {
		t.Run(tt.file, func(t *testing.T) {
			problems, err := LintFS(fstest.MapFS{tt.file: {Data: []byte(tt.data)}})
			require.NoError(t, err)
			var got []string
			for _, p := range problems {
				if p.Message == "unknown field (ignored)" {
					require.Equal(t, SeverityWarning, p.Severity)
					require.Equal(t, tt.file, p.File)
					require.Equal(t, "a.b", p.Subject)
					got = append(got, p.Field)
				}
			}
			require.Equal(t, tt.want, got)
		})
	}
}

// A field of a governing section (data, regionPolicy, replay, rateLimit,
// integrity, quarantine) that the broker does not know is an error, not a
// warning: ignored, a misspelt "forbidenFields" left the subject's
// forbidden list empty and "allowedRegion" let any region through, while
// the catalog read as if they held.
func TestUnknownGoverningFieldIsAnError(t *testing.T) {
	for _, field := range []string{
		`"data":{"forbidenFields":["ssn"]}`,
		`"regionPolicy":{"home":"uk","allowedRegion":["uk"]}`,
		`"replay":{"maxAge":1000}`,
		`"rateLimit":{"perSecond":5,"burts":5}`,
		`"integrity":{"requireSignature":true}`,
		`"quarantine":{"redactFeilds":["ssn"]}`,
	} {
		t.Run(field, func(t *testing.T) {
			data := `{"name":"a.b","version":"v1","intents":["x"],` + field + `}`
			problems, err := LintFS(fstest.MapFS{"subjects/a.json": {Data: []byte(data)}})
			require.NoError(t, err)
			var errs []Problem
			for _, p := range problems {
				if p.IsError() && strings.Contains(p.Message, "unknown field of") {
					errs = append(errs, p)
				}
			}
			require.Len(t, errs, 1, "%v", problems)
		})
	}
}

func TestLineCol(t *testing.T) {
	data := []byte("ab\ncd\n")
	for _, tt := range []struct {
		off       int64
		line, col int
	}{{0, 1, 1}, {1, 1, 2}, {3, 2, 1}, {5, 2, 3}, {6, 3, 1}, {99, 3, 1}, {-1, 1, 1}} {
		l, c := lineCol(data, tt.off)
		require.Equal(t, []int{tt.line, tt.col}, []int{l, c}, "offset %d", tt.off)
	}
}

func TestLoadErrorNamesPosition(t *testing.T) {
	_, err := ParseSubject("x.json", []byte("{"))
	var pe *Error
	require.True(t, errors.As(err, &pe))
	require.Equal(t, []any{"x.json", 1, 2}, []any{pe.File, pe.Line, pe.Column})
}
