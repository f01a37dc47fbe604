package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"pigeon/internal/cond"
	"pigeon/internal/datapath"
	"pigeon/internal/schema"
	"pigeon/internal/textrule"
)

// Problem severities. A catalog with an error problem is refused by the
// broker and makes `pigeon policy lint` exit 1; warnings are advice.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Problem is one finding of Lint: where (file, subject, field path such as
// "policy.publish[0].effect") and what.
type Problem struct {
	File     string `json:"file,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Field    string `json:"field,omitempty"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// String renders the problem as
// "subjects/x.json: policy.publish[0].effect: error: effect must be ...".
// Without a file it names the subject instead.
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.File != "":
		b.WriteString(p.File)
	case p.Subject != "":
		b.WriteString("subject " + p.Subject)
	default:
		b.WriteString("catalog")
	}
	if p.Field != "" {
		b.WriteString(": " + p.Field)
	}
	b.WriteString(": " + p.Severity + ": " + p.Message)
	return b.String()
}

// IsError reports whether the problem has error severity.
func (p Problem) IsError() bool { return p.Severity == SeverityError }

// LintDir loads the catalog in dir, as LoadDir does, and lints it. A
// catalog that does not load is returned as the error (an *Error, naming
// the file as LoadDir does); the problems then include
// unknown fields and ignored files as warnings, and unknown fields of a
// rule as errors (ignored, they would widen the rule).
func LintDir(dir string) ([]Problem, error) {
	return lintFS(dirFS(dir), func(p string) string { return filepath.Join(dir, filepath.FromSlash(p)) })
}

// LintFS is LintDir over a file system rooted at the catalog.
func LintFS(fsys fs.FS) ([]Problem, error) {
	return lintFS(fsys, func(p string) string { return p })
}

// lintFS is LintFS naming files in errors through display.
func lintFS(fsys fs.FS, display func(string) string) ([]Problem, error) {
	c, ld, err := load(fsys, display)
	if err != nil {
		return nil, err
	}
	problems := append(ld.problems, lintCatalog(c, ld.files)...)
	return problems, nil
}

// Lint checks every subject and schema of c and returns every problem it
// finds, in catalog order; it never stops at the first. A catalog with no
// error problems is one the broker accepts. Lint does not modify c.
func Lint(c *Catalog) []Problem {
	if c == nil {
		return []Problem{{Severity: SeverityError, Message: "no catalog"}}
	}
	files := make([]string, len(c.Subjects))
	for i := range c.Subjects {
		files[i] = c.Sources.Subjects[c.Subjects[i].Name]
	}
	return lintCatalog(c, files)
}

func lintCatalog(c *Catalog, files []string) []Problem {
	var l linter
	seen := map[string]int{}
	used := map[string]bool{}
	for i := range c.Subjects {
		s := &c.Subjects[i]
		l.file, l.subject = files[i], shownName(s.Name)
		if j, dup := seen[s.Name]; dup && s.Name != "" {
			l.errorf("name", "subject %q is also defined by subject #%d", s.Name, j+1)
		}
		seen[s.Name] = i
		if s.Schema != nil {
			used[s.Schema.Name] = true
		}
		l.subjectPolicy(s, c.Schemas)
	}
	names := make([]string, 0, len(c.Schemas))
	for n := range c.Schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l.file, l.subject = c.Sources.Schemas[n], ""
		field := ""
		if l.file == "" {
			field = "schemas." + shownName(n)
		}
		l.text(field, "schema name", n)
		if ref, ok := externalSchemaRef(c.Schemas[n]); ok {
			l.errorf(field, "schema %q refers to %q, outside the schema: schemas are not loaded from URLs or files; "+
				"copy the referenced schema under definitions and refer to it as #/definitions/NAME", n, ref)
		} else if err := compileJSONSchema(c.Schemas[n]); errors.Is(err, schema.ErrRecursion) {
			l.errorf(field, "schema %q is refused: %v", n, err)
		} else if err != nil {
			l.errorf(field, "schema %q does not compile: %v", n, err)
		} else if at, ok := regexFormat(c.Schemas[n]); ok {
			l.warnf(field, "schema %q checks format \"regex\" at %s: every data string there is parsed as a regular expression, "+
				"which costs up to a few hundred bytes of memory per byte (about 0.2 s and 340 MB for a 1 MiB string); "+
				"prefer a pattern, or leave the check to receivers", n, at)
		}
		if !used[n] {
			l.warnf(field, "schema %q is not used by any subject", n)
		}
	}
	return l.problems
}

// compileJSONSchema compiles a schema the way the broker does, turning a
// panic inside the schema library into an error.
func compileJSONSchema(js []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("schema library panic: %v", r)
		}
	}()
	_, err = schema.Compile(js)
	return err
}

// externalSchemaRef returns the first $ref of a JSON schema that points
// outside the schema's own document (anything but "#" and "#/…"), which
// the schema library would fetch over HTTP or read from a file when the
// schema is compiled. Values of enum, const, default and examples are
// data, not schemas; member names under properties, definitions and the
// like are names, not keywords.
func externalSchemaRef(js []byte) (string, bool) {
	var doc any
	if json.Unmarshal(js, &doc) != nil {
		return "", false // compiling reports it
	}
	return findExternalRef(doc, false)
}

// regexFormat returns the JSON pointer of the first schema of a JSON schema
// that has format "regex", which the validator checks by parsing each data
// string as a regular expression: a cost linear in the message, but a
// steep one.
func regexFormat(js []byte) (string, bool) {
	var doc any
	if json.Unmarshal(js, &doc) != nil {
		return "", false
	}
	return findRegexFormat(doc, "#", false)
}

func findRegexFormat(v any, at string, names bool) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if !names && (dataKeywords[k] || k == "format" && x[k] == "regex") {
				if k == "format" {
					return at, true
				}
				continue
			}
			tok := strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			if p, ok := findRegexFormat(x[k], at+"/"+tok, !names && schemaMaps[k]); ok {
				return p, true
			}
		}
	case []any:
		for i, e := range x {
			if p, ok := findRegexFormat(e, at+"/"+strconv.Itoa(i), false); ok {
				return p, true
			}
		}
	}
	return "", false
}

// schemaMaps are the keywords whose value maps names to schemas.
var schemaMaps = map[string]bool{"properties": true, "patternProperties": true, "definitions": true, "$defs": true,
	"dependencies": true, "dependentSchemas": true}

// dataKeywords are the keywords whose value is data, not a schema.
var dataKeywords = map[string]bool{"enum": true, "const": true, "default": true, "examples": true}

func findExternalRef(v any, names bool) (string, bool) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			switch {
			case names:
			case k == "$ref":
				if ref, ok := x[k].(string); ok && !strings.HasPrefix(ref, "#") {
					return ref, true
				}
				continue
			case dataKeywords[k]:
				continue
			}
			if ref, ok := findExternalRef(x[k], !names && schemaMaps[k]); ok {
				return ref, true
			}
		}
	case []any:
		for _, e := range x {
			if ref, ok := findExternalRef(e, false); ok {
				return ref, true
			}
		}
	}
	return "", false
}

type linter struct {
	file, subject string
	problems      []Problem
}

func (l *linter) add(sev, field, format string, args ...any) {
	l.problems = append(l.problems, Problem{File: l.file, Subject: l.subject, Field: field,
		Severity: sev, Message: fmt.Sprintf(format, args...)})
}

func (l *linter) errorf(field, format string, args ...any) {
	l.add(SeverityError, field, format, args...)
}

func (l *linter) warnf(field, format string, args ...any) {
	l.add(SeverityWarning, field, format, args...)
}

// oneOf checks an enumerated string field; empty is allowed when the
// allowed list contains "".
func (l *linter) oneOf(field, value string, allowed ...string) {
	if slices.Contains(allowed, value) {
		return
	}
	quoted := make([]string, 0, len(allowed))
	for _, a := range allowed {
		if a != "" {
			quoted = append(quoted, fmt.Sprintf("%q", a))
		}
	}
	l.errorf(field, "%s is %q; must be %s", lastSegment(field), value, orList(quoted))
}

// maxMillis is the largest number of milliseconds whose time.Duration does
// not overflow: the broker refuses larger ones (pigeon.MillisField).
const maxMillis = int64(math.MaxInt64 / int64(time.Millisecond))

// nonNegative checks a duration in milliseconds: not negative, and small
// enough that its time.Duration does not overflow.
func (l *linter) nonNegative(field string, v int64) {
	switch {
	case v < 0:
		l.errorf(field, "%s must not be negative (got %d)", lastSegment(field), v)
	case v > maxMillis:
		l.errorf(field, "%s %d is out of range", lastSegment(field), v)
	}
}

func lastSegment(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[i+1:]
	}
	return field
}

func orList(items []string) string {
	switch len(items) {
	case 0:
		return "empty"
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// qualityCodePattern is the shape of a stable decision code.
var qualityCodePattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

func (l *linter) subjectPolicy(s *SubjectPolicy, schemas map[string][]byte) {
	l.name(s.Name)
	if s.Version == "" {
		l.errorf("version", "version is required")
	} else if strings.ContainsAny(s.Version, "@ \t\r\n") {
		l.errorf("version", "version %q must not contain '@' or whitespace (policy ids are name@version)", s.Version)
	} else {
		l.text("version", "version", s.Version)
	}
	switch s.Mode {
	case "":
		l.warnf("mode", "mode is empty; defaults to %q", ModePubSub)
	case ModePubSub, ModeWorkQueue, ModeRequestReply:
	default:
		l.errorf("mode", "mode is %q; must be %q, %q or %q", s.Mode, ModePubSub, ModeWorkQueue, ModeRequestReply)
	}
	if len(s.Intents) == 0 {
		l.errorf("intents", "intents must list at least one intent")
	}
	l.stringList("intents", s.Intents)

	l.schema(s.Schema, schemas)
	l.region(&s.RegionPolicy)
	l.delivery(&s.Delivery)

	l.nonNegative("replay.maxAgeMs", s.Replay.MaxAgeMs)
	l.nonNegative("retention.messagesMs", s.Retention.MessagesMs)
	l.nonNegative("retention.auditMs", s.Retention.AuditMs)
	if n := s.Retention.MaxMessages; n < 0 {
		l.errorf("retention.maxMessages", "maxMessages must not be negative (got %d)", n)
	}
	if n := s.Retention.MaxBytes; n < 0 {
		l.errorf("retention.maxBytes", "maxBytes must not be negative (got %d)", n)
	}

	l.data(&s.Data)
	l.rules(s)

	if rl := s.RateLimit; rl != nil {
		if !(rl.PerSecond > 0) || math.IsInf(rl.PerSecond, 0) {
			l.errorf("rateLimit.perSecond", "perSecond must be a positive number (got %v)", rl.PerSecond)
		}
		if rl.Burst < 1 {
			l.errorf("rateLimit.burst", "burst must be at least 1 (got %d)", rl.Burst)
		}
	}
	l.qualityRules(s.Rules)
	l.oneOf("integrity.signature", s.Integrity.Signature, "", "required", "optional")
}

func (l *linter) name(name string) {
	switch {
	case name == "":
		l.errorf("name", "name is required")
	case strings.ContainsAny(name, "*> \t\r\n"):
		l.errorf("name", "name %q must not contain '*', '>' or whitespace", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		l.errorf("name", "name %q has an empty dot-separated token", name)
	default:
		l.text("name", "name", name)
	}
}

// text reports a name or value of the catalog (a subject, version, intent,
// region, principal, role, attribute, classification, field path, schema
// or rule name) that is not UTF-8 or holds a control or formatting
// character, as the broker reads one in every name (internal/textrule):
// C0 (tab, CR and LF included), DEL, C1, and the formatting characters
// that reorder the text around them or break its line (U+061C, U+200E,
// U+200F, U+2028 to U+202E, U+2066 to U+2069). Names are written into
// audit records, decisions, receipts, the data directory and every
// listing of the catalog, and are printed by tools that show them raw;
// ESC, CSI (U+009B) or CR in one would drive the terminal that shows it,
// and U+202E would show "payments\u202Ecod.exe" as another name. It
// reports whether v passed.
func (l *linter) text(field, what, v string) bool {
	switch {
	case !utf8.ValidString(v):
		l.errorf(field, "%s %q is not valid UTF-8", what, v)
	case textrule.HasControl(v):
		l.errorf(field, "%s %q holds a control character (C0, DEL or C1) or a formatting character that reorders or breaks a line", what, v)
	default:
		return true
	}
	return false
}

// expression reports a CEL expression (a rule's when, a quality rule's
// expr) that holds a control or formatting character (textrule) other
// than tab and newline, which lay out an expression over lines (CEL
// refuses them in a string literal). The formatting characters that
// reorder text are refused as in a name: an expression is code, shown in
// listings and reviews, where U+202E in a string literal shows the
// expression as another one (the "Trojan Source" class); a literal that
// means to hold one writes it as an escape ("\u202e"), which CEL reads.
// It reports whether v passed.
func (l *linter) expression(field, v string) bool {
	if strings.ContainsFunc(v, func(r rune) bool { return textrule.IsControlRune(r) && r != '\t' && r != '\n' }) {
		l.errorf(field, "expression %q holds a control character other than tab and newline, or a formatting character that reorders or breaks a line", v)
		return false
	}
	return true
}

// shownName is a name (or a message that quotes one) as a problem shows
// it: itself when it is text, quoted (as %q) when it is not, so that no
// problem, message or field path carries a control or formatting
// character raw.
func shownName(name string) string {
	if utf8.ValidString(name) && !textrule.HasControl(name) {
		return name
	}
	return strconv.Quote(name)
}

// stringList reports empty and repeated entries.
func (l *linter) stringList(field string, list []string) {
	seen := map[string]bool{}
	for i, v := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case strings.TrimSpace(v) == "":
			l.errorf(at, "entry is empty")
		case !l.text(at, "entry", v):
		case seen[v]:
			l.warnf(at, "%q is listed twice", v)
		}
		seen[v] = true
	}
}

var schemaCompatibility = []string{"", "backward", "backward_transitive", "forward", "forward_transitive",
	"full", "full_transitive", "none"}

func (l *linter) schema(ref *SchemaRef, schemas map[string][]byte) {
	if ref == nil {
		l.warnf("schema", "no schema: message data is not validated")
		return
	}
	switch _, ok := schemas[ref.Name]; {
	case ref.Name == "":
		l.errorf("schema.name", "schema.name is required when schema is set")
	case !l.text("schema.name", "schema.name", ref.Name):
	case !ok:
		l.errorf("schema.name", "unknown schema %q: no schemas/%s.json, .yaml or .yml in the catalog", ref.Name, ref.Name)
	}
	if !slices.Contains(schemaCompatibility, strings.ToLower(ref.Compatibility)) {
		l.warnf("schema.compatibility", "compatibility %q is not one of %s", ref.Compatibility,
			strings.Join(schemaCompatibility[1:], ", "))
	}
}

func (l *linter) region(r *RegionPolicy) {
	l.text("regionPolicy.home", "home region", r.Home)
	l.stringList("regionPolicy.allowedRegions", r.AllowedRegions)
	l.oneOf("regionPolicy.crossRegion", r.CrossRegion, "", "allow", "deny")
	if r.Home != "" && len(r.AllowedRegions) > 0 && !slices.Contains(r.AllowedRegions, r.Home) {
		l.warnf("regionPolicy.home", "home region %q is not in allowedRegions", r.Home)
	}
}

func (l *linter) delivery(d *DeliveryPolicy) {
	if d.Retry.MaxAttempts < 0 {
		l.errorf("delivery.retry.maxAttempts", "maxAttempts must not be negative (got %d)", d.Retry.MaxAttempts)
	}
	l.oneOf("delivery.retry.backoff", d.Retry.Backoff, "", "fixed", "exponential", "linear")
	l.nonNegative("delivery.retry.maxDelayMs", d.Retry.MaxDelayMs)
	l.nonNegative("delivery.idempotency.ttlMs", d.Idempotency.TTLMs)
	switch key := d.Idempotency.Key; {
	case key == "" || key == "idempotencyKey":
	case !l.text("delivery.idempotency.key", "key", key):
	case strings.HasPrefix(key, "data."):
		l.fieldPath("delivery.idempotency.key", strings.TrimPrefix(key, "data."))
	default:
		l.warnf("delivery.idempotency.key", "key %q is neither \"idempotencyKey\" nor a \"data.\" path; the envelope's idempotencyKey is used", key)
	}
	l.nonNegative("delivery.ackWaitMs", d.AckWaitMs)
}

func (l *linter) data(d *DataPolicy) {
	if d.Classification == "" {
		l.warnf("data.classification", "no classification: messages of any classification are accepted")
	}
	l.text("data.classification", "classification", d.Classification)
	l.oneOf("data.encryption", d.Encryption, "", "required", "optional")
	l.oneOf("data.tokenization", d.Tokenization, "", "required", "optional")
	// Forbidden and tokenized paths match member names ignoring case.
	l.fieldPaths("data.forbiddenFields", d.ForbiddenFields, strings.EqualFold)
	l.fieldPaths("data.tokenizedFields", d.TokenizedFields, strings.EqualFold)
	l.fieldPaths("data.routingFields", d.RoutingFields, func(a, b string) bool { return a == b })
	for i, f := range d.RoutingFields {
		folds := func(p string) bool { return strings.EqualFold(p, f) }
		if slices.ContainsFunc(d.ForbiddenFields, folds) || slices.ContainsFunc(d.TokenizedFields, folds) {
			l.errorf(fmt.Sprintf("data.routingFields[%d]", i), "%q is forbidden or tokenized and cannot stay in clear", f)
		}
	}
}

// fieldPaths checks a list of dot paths into data such as "card.pan"; same
// says when two entries name the same field.
func (l *linter) fieldPaths(field string, paths []string, same func(a, b string) bool) {
	for i, p := range paths {
		at := fmt.Sprintf("%s[%d]", field, i)
		l.fieldPath(at, p)
		if p != "" && slices.ContainsFunc(paths[:i], func(q string) bool { return same(p, q) }) {
			l.warnf(at, "%q is listed twice", p)
		}
	}
}

// fieldPath checks one dot path: non-empty segments without whitespace,
// brackets or wildcards.
func (l *linter) fieldPath(at, p string) {
	if p == "" {
		l.errorf(at, "field path is empty")
		return
	}
	if !l.text(at, "field path", p) {
		return
	}
	if !datapath.WellFormed(p) {
		l.errorf(at, "field path %q is malformed: want dot-separated names such as \"card.pan\"", p)
	}
}

func (l *linter) rules(s *SubjectPolicy) {
	ops := make([]string, 0, len(s.Policy))
	for op := range s.Policy {
		ops = append(ops, string(op))
	}
	sort.Slice(ops, func(i, j int) bool {
		return opRank(ops[i]) < opRank(ops[j]) || opRank(ops[i]) == opRank(ops[j]) && ops[i] < ops[j]
	})

	allows := map[Operation]bool{}
	for _, op := range ops {
		field := "policy." + shownName(op)
		if !Operation(op).Valid() {
			l.errorf(field, "unknown operation %q; must be publish, receive, ack or replay", op)
		}
		for i := range s.Policy[Operation(op)] {
			r := &s.Policy[Operation(op)][i]
			if r.Effect == EffectAllow {
				allows[Operation(op)] = true
			}
			l.rule(fmt.Sprintf("%s[%d]", field, i), Operation(op), r, s)
		}
	}
	if !allows[OpPublish] {
		l.warnf("policy.publish", "no rule allows publish: nobody can publish to this subject")
	}
	if s.Replay.Allowed && !allows[OpReplay] {
		l.warnf("policy.replay", "replay.allowed is true but no rule allows replay")
	}
	if !s.Replay.Allowed && allows[OpReplay] {
		l.warnf("policy.replay", "rules allow replay but replay.allowed is false: replay stays denied")
	}
}

func opRank(op string) int {
	if i := Operation(op).Index(); i >= 0 {
		return i
	}
	return len(Operations)
}

func (l *linter) rule(at string, op Operation, r *RuleSpec, s *SubjectPolicy) {
	if r.Effect != EffectAllow && r.Effect != EffectDeny {
		l.errorf(at+".effect", "effect must be %q or %q (got %q)", EffectAllow, EffectDeny, r.Effect)
	}
	l.stringList(at+".principals", r.Principals)
	l.stringList(at+".roles", r.Roles)
	l.stringList(at+".intents", r.Intents)
	l.stringList(at+".regions", r.Regions)
	for i, in := range r.Intents {
		if in != "" && len(s.Intents) > 0 && !slices.Contains(s.Intents, in) {
			l.warnf(fmt.Sprintf("%s.intents[%d]", at, i), "intent %q is not among the subject's intents: it never matches", in)
		}
	}
	for i, rg := range r.Regions {
		if rg != "" && len(s.RegionPolicy.AllowedRegions) > 0 && !slices.Contains(s.RegionPolicy.AllowedRegions, rg) {
			l.warnf(fmt.Sprintf("%s.regions[%d]", at, i), "region %q is not in regionPolicy.allowedRegions", rg)
		}
	}
	keys := make([]string, 0, len(r.Attributes))
	for k := range r.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.TrimSpace(k) == "" {
			l.errorf(at+".attributes", "attribute name is empty")
		} else if l.text(at+".attributes", "attribute name", k) {
			l.text(at+".attributes."+k, "value", r.Attributes[k])
		}
	}
	if r.When != "" && l.expression(at+".when", r.When) {
		if _, err := cond.Compile(r.When); err != nil {
			l.errorf(at+".when", "%s", shownName(err.Error()))
		}
	}
	// Any operation: an open receive rule hands every principal the data.
	if r.Effect == EffectAllow && len(r.Principals) == 0 && len(r.Roles) == 0 &&
		len(r.Attributes) == 0 && r.When == "" {
		l.warnf(at, "rule allows %s to every principal", op)
	}
}

func (l *linter) qualityRules(rules []QualityRule) {
	seen := map[string]bool{}
	for i := range rules {
		q := &rules[i]
		at := fmt.Sprintf("rules[%d]", i)
		switch {
		case strings.TrimSpace(q.Name) == "":
			l.errorf(at+".name", "name is required")
		case !l.text(at+".name", "rule name", q.Name):
		case seen[q.Name]:
			l.errorf(at+".name", "rule name %q is used twice", q.Name)
		}
		seen[q.Name] = true
		switch {
		case strings.TrimSpace(q.Expr) == "":
			l.errorf(at+".expr", "expr is required")
		case l.expression(at+".expr", q.Expr):
			if _, err := cond.Compile(q.Expr); err != nil {
				l.errorf(at+".expr", "%s", shownName(err.Error()))
			}
		}
		l.oneOf(at+".onFailure", q.OnFailure, "", "deny", "quarantine")
		if q.Code != "" && !qualityCodePattern.MatchString(q.Code) {
			l.errorf(at+".code", "code %q must be upper-case letters, digits and '_' (like %s)", q.Code, codeDataQuality)
		}
	}
}

// codeDataQuality is the broker's default code of a failed data-quality
// rule (pigeon.CodeDataQuality), named as an example.
const codeDataQuality = "DATA_QUALITY_FAILED"
