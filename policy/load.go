package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"pigeon/internal/jsontext"
	"pigeon/internal/yamlnum"
)

// Catalog layout on disk: subjects/*.{json,yaml,yml} hold one SubjectPolicy
// each; schemas/*.{json,yaml,yml} hold one JSON schema each, named by the
// file's base name without its extension.
const (
	subjectsDir = "subjects"
	schemasDir  = "schemas"
)

// Sources records which file defined each subject and schema, as a
// slash-separated path relative to the catalog root (for example
// "subjects/payments.authorize.json"). It is empty for catalogs built in
// code.
type Sources struct {
	Subjects map[string]string // subject name → file
	Schemas  map[string]string // schema name → file
}

// Error is a catalog that cannot be loaded or a subject policy that does
// not parse. Its text names the file and, where known, the line and column;
// File, Line and Column hold them where they are known (0 when not).
// `pigeon serve` and `pigeon policy lint` report it as POLICY_INVALID.
type Error struct {
	File         string
	Line, Column int
	msg          string
	err          error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.err }

// newError builds an *Error wrapping cause (which may be nil).
func newError(cause error, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{msg: msg, err: cause}
}

// LoadDir reads a catalog directory: subject policies from dir/subjects
// and JSON schemas from dir/schemas (which may be absent). JSON files are
// read as the reference broker writes them, YAML files through the same
// field names. Unknown fields are ignored (LintDir reports them). A file
// that does not parse, two files defining the same subject or schema, or a
// missing subjects directory is an *Error that names the file and, where
// known, the line and column.
//
// Every file is read as readFile does: a file that is not a regular file
// (a named pipe, a device) is refused without waiting on it (the cause is
// ErrNotRegularFile), and so is one larger than MaxFileSize (a
// *FileTooLargeError).
//
// LoadDir does not validate policies; run Lint on the result. The broker
// lints every catalog it registers (pigeon.New, Engine.LoadCatalog,
// Engine.ReplaceSubject) and refuses one with errors.
func LoadDir(dir string) (*Catalog, error) {
	c, _, err := load(dirFS(dir), func(p string) string { return filepath.Join(dir, filepath.FromSlash(p)) })
	return c, err
}

// LoadFS is LoadDir over a file system rooted at the catalog, such as an
// embed.FS or fstest.MapFS. Files are refused as LoadDir refuses them,
// but whether opening one can block is fsys's: os.DirFS waits on a named
// pipe before its type can be checked, so load a directory with LoadDir.
func LoadFS(fsys fs.FS) (*Catalog, error) {
	c, _, err := load(fsys, func(p string) string { return p })
	return c, err
}

// ParseSubject decodes one subject policy. name is a file name: a ".json"
// extension selects JSON, ".yaml" or ".yml" YAML; with any other extension
// the content decides (JSON when it starts with '{'). Unknown fields are
// ignored. Errors are *Error naming name and the position.
func ParseSubject(name string, data []byte) (SubjectPolicy, error) {
	p, _, err := parseSubject(name, data)
	return p, err
}

// catalogLoad is what loading learns beyond the Catalog: the file of each
// subject (parallel to Catalog.Subjects, so nameless subjects keep theirs)
// and warnings such as unknown fields.
type catalogLoad struct {
	files    []string
	problems []Problem
}

func load(fsys fs.FS, display func(string) string) (*Catalog, *catalogLoad, error) {
	c := &Catalog{
		Schemas: map[string][]byte{},
		Sources: Sources{Subjects: map[string]string{}, Schemas: map[string]string{}},
	}
	ld := &catalogLoad{}

	subjects, warns, err := catalogFiles(fsys, subjectsDir, false)
	if err != nil {
		return nil, nil, newError(err, "%s: %v", display(subjectsDir), err)
	}
	ld.problems = append(ld.problems, warns...)
	for _, file := range subjects {
		data, err := readFile(fsys, file, display(file))
		if err != nil {
			return nil, nil, err
		}
		p, unknown, err := parseSubject(display(file), data)
		if err != nil {
			return nil, nil, err
		}
		if p.Name != "" {
			if prev, dup := c.Sources.Subjects[p.Name]; dup {
				return nil, nil, newError(nil, "%s: subject %q is already defined in %s",
					display(file), p.Name, display(prev))
			}
			c.Sources.Subjects[p.Name] = file
		}
		for _, f := range unknown {
			ld.problems = append(ld.problems, unknownFieldProblem(file, p.Name, f))
		}
		c.Subjects = append(c.Subjects, p)
		ld.files = append(ld.files, file)
	}

	schemas, warns, err := catalogFiles(fsys, schemasDir, true)
	if err != nil {
		return nil, nil, newError(err, "%s: %v", display(schemasDir), err)
	}
	ld.problems = append(ld.problems, warns...)
	for _, file := range schemas {
		data, err := readFile(fsys, file, display(file))
		if err != nil {
			return nil, nil, err
		}
		base := path.Base(file)
		name := strings.TrimSuffix(base, path.Ext(base))
		if prev, dup := c.Sources.Schemas[name]; dup {
			return nil, nil, newError(nil, "%s: schema %q is already defined in %s",
				display(file), name, display(prev))
		}
		js, err := parseSchema(display(file), data)
		if err != nil {
			return nil, nil, err
		}
		c.Schemas[name] = js
		c.Sources.Schemas[name] = file
	}
	return c, ld, nil
}

// ruleField is the path of a field of a rule: policy.<operation>[i].<field>.
var ruleField = regexp.MustCompile(`^policy\.[^.\[]+\[\d+\]\.`)

// governing are the sections whose fields each restrict what the gates
// let through (a forbidden field, an allowed region, a replay window, a
// rate, a signature requirement, what a quarantine record keeps): one
// misspelt, or one of a newer broker, would be a restriction silently
// not applied.
var governing = []string{"data.", "regionPolicy.", "replay.", "rateLimit.", "integrity.", "quarantine."}

// unknownFieldProblem reports a field no policy field took. Elsewhere it
// is a warning (a newer catalog still loads), but a rule is a conjunction
// of conditions and an absent condition matches everything: ignoring
// "principal" (for "principals") or a condition of a newer broker would
// leave a rule that allows every principal. So in a rule it is an error,
// and so it is in a governing section, where ignoring "forbidenFields" or
// "allowedRegion" would leave the subject open where it says it is not:
// the catalog fails closed.
func unknownFieldProblem(file, subject, field string) Problem {
	if ruleField.MatchString(field) {
		return Problem{File: file, Subject: subject, Field: field, Severity: SeverityError,
			Message: "unknown rule field: the broker would ignore this condition and the rule would match more than it says " +
				"(rule fields: effect, principals, roles, intents, regions, attributes, requireReason, when)"}
	}
	for _, g := range governing {
		if strings.HasPrefix(field, g) {
			return Problem{File: file, Subject: subject, Field: field, Severity: SeverityError,
				Message: "unknown field of " + strings.TrimSuffix(g, ".") + ": the broker would not apply it and the subject would be less governed than it says"}
		}
	}
	return Problem{File: file, Subject: subject, Field: field, Severity: SeverityWarning, Message: "unknown field (ignored)"}
}

// catalogFiles lists the policy files of one catalog directory in name
// order. Hidden files are skipped silently; subdirectories and other
// extensions are skipped with a warning.
func catalogFiles(fsys fs.FS, dir string, optional bool) (files []string, warns []Problem, err error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		if optional && errors.Is(err, fs.ErrNotExist) {
			return nil, nil, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, errors.New("missing directory: a catalog holds subjects/ and schemas/")
		}
		return nil, nil, err
	}
	for _, e := range entries {
		name := e.Name()
		file := path.Join(dir, name)
		switch {
		case strings.HasPrefix(name, "."):
		case e.IsDir():
			warns = append(warns, Problem{File: file, Severity: SeverityWarning, Message: "directory ignored"})
		case formatOf(name) == "":
			warns = append(warns, Problem{File: file, Severity: SeverityWarning,
				Message: "file ignored: not .json, .yaml or .yml"})
		default:
			files = append(files, file)
		}
	}
	return files, warns, nil
}

// formatOf returns "json" or "yaml" from a file name's extension, or "".
func formatOf(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".json":
		return "json"
	case ".yaml", ".yml":
		return "yaml"
	}
	return ""
}

// sniffFormat picks JSON for content that starts with '{', YAML otherwise.
func sniffFormat(name string, data []byte) string {
	if f := formatOf(name); f != "" {
		return f
	}
	if t := bytes.TrimLeft(data, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
		return "json"
	}
	return "yaml"
}

// parseSubject decodes a subject policy and lists the unknown fields
// it held, as dot paths.
func parseSubject(name string, data []byte) (SubjectPolicy, []string, error) {
	var p SubjectPolicy
	var generic any
	if sniffFormat(name, data) == "json" {
		if err := decodeJSON(data, &p); err != nil {
			return SubjectPolicy{}, nil, jsonError(name, data, err)
		}
		_ = json.Unmarshal(data, &generic) // cannot fail: the typed decode succeeded
	} else {
		if err := decodeYAML(data, &p); err != nil {
			return SubjectPolicy{}, nil, yamlError(name, err)
		}
		// yaml.v3 truncates a fraction in an integer field, which JSON
		// refuses: "maxAgeMs: 0.5" would be 0, no limit at all.
		var doc yaml.Node
		_ = yaml.Unmarshal(data, &doc) // cannot fail: the typed decode succeeded
		if n := yamlnum.Fraction(&doc, reflect.TypeFor[SubjectPolicy]()); n != nil {
			return SubjectPolicy{}, nil, yamlError(name, fmt.Errorf("line %d: %s is not an integer: this field takes a whole number", n.Line, n.Value))
		}
		_ = yaml.Unmarshal(data, &generic)
	}
	if _, ok := asObject(generic); !ok {
		return SubjectPolicy{}, nil, newError(nil, "%s: a subject policy must be an object", name)
	}
	var unknown []string
	unknownFields(generic, reflect.TypeFor[SubjectPolicy](), "", sniffFormat(name, data) == "json", &unknown)
	for _, f := range unknown {
		// A JSON member in another case was refused when it was decoded;
		// a YAML key in another case is refused here, not ignored.
		if field, ok := caseVariantOf(reflect.TypeFor[SubjectPolicy](), f); ok {
			return SubjectPolicy{}, nil, newError(&caseVariantError{path: f, field: field}, "%s: %v", name,
				&caseVariantError{path: f, field: field})
		}
	}
	return p, unknown, nil
}

// parseSchema checks that a schema file parses and returns it as JSON: JSON
// files unchanged, YAML files converted.
func parseSchema(name string, data []byte) ([]byte, error) {
	if formatOf(name) == "json" {
		var v any
		if err := decodeJSON(data, &v); err != nil {
			return nil, jsonError(name, data, err)
		}
		return data, nil
	}
	var v any
	if err := decodeYAML(data, &v); err != nil {
		return nil, yamlError(name, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(name, err)
	}
	if err := yamlKeysAreNames(&doc); err != nil {
		return nil, yamlError(name, err)
	}
	v, err := yamlToJSONValue(v)
	if err != nil {
		return nil, newError(nil, "%s: %v", name, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, newError(err, "%s: cannot convert to JSON: %v", name, err)
	}
	return out, nil
}

var errEmptyFile = errors.New("empty file")

// trailingDataError reports content after the one top-level JSON value.
type trailingDataError struct{ offset int64 }

func (e *trailingDataError) Error() string { return "unexpected data after the top-level value" }

// maxJSONDepth is the nesting a policy or schema file may reach, as
// encoding/json allows.
const maxJSONDepth = 10000

// caseVariantError is a member whose name differs from a field's only in
// case.
type caseVariantError struct{ path, field string }

func (e *caseVariantError) Error() string {
	return fmt.Sprintf("member %q differs from %q only in case: field names are case-sensitive", e.path, e.field)
}

// decodeJSON decodes exactly one JSON value, refusing what encoding/json
// would read silently but other readers read otherwise: an object with
// two members of one name (encoding/json keeps the last, a reviewer sees
// the first, YAML refuses it) and strings that are not UTF-8 (a
// *jsontext.Error), and a member named as a field of v only in another
// case (a *caseVariantError: encoding/json would fill the field from it,
// so "ForbiddenFields":[] could empty a "forbiddenFields" list above it).
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		if err == io.EOF {
			return errEmptyFile
		}
		return err
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		for end < int64(len(data)) && strings.IndexByte(" \t\r\n", data[end]) >= 0 {
			end++
		}
		return &trailingDataError{offset: end}
	}
	if err := jsontext.Validate(data, maxJSONDepth); err != nil {
		return err
	}
	if path, field, ok := jsontext.CaseVariant(data, reflect.TypeOf(v)); ok {
		return &caseVariantError{path: path, field: field}
	}
	return nil
}

// decodeYAML decodes exactly one YAML document.
func decodeYAML(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		if err == io.EOF {
			return errEmptyFile
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		return errors.New("more than one YAML document")
	}
	return nil
}

// jsonError turns a decoding error into an *Error naming file, line and
// column.
func jsonError(name string, data []byte, err error) error {
	var (
		syn   *json.SyntaxError
		typ   *json.UnmarshalTypeError
		trail *trailingDataError
		text  *jsontext.Error
	)
	switch {
	case errors.Is(err, errEmptyFile):
		return newError(err, "%s: empty file", name)
	case errors.As(err, &syn):
		// Offset counts the offending byte.
		return positionError(name, data, syn.Offset-1, err, syn.Error())
	case errors.As(err, &trail):
		return positionError(name, data, trail.offset, err, trail.Error())
	case errors.As(err, &text):
		msg := "string is not valid UTF-8 (or holds a lone surrogate escape)"
		if text.Kind == jsontext.KindDuplicateKey {
			msg = fmt.Sprintf("the object at %q has two members of one name", cmp.Or(text.Path, "/"))
		} else if text.Kind != jsontext.KindInvalidUTF8 {
			msg = strings.TrimSuffix(text.Error(), " at offset "+strconv.Itoa(text.Offset))
		}
		return positionError(name, data, int64(text.Offset), err, msg)
	case errors.As(err, &typ):
		msg := fmt.Sprintf("cannot use a JSON %s as %s", typ.Value, jsonKind(typ.Type))
		if typ.Field != "" {
			msg = typ.Field + ": " + msg
		}
		return positionError(name, data, typ.Offset, err, msg)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return positionError(name, data, int64(len(data)), err, "unexpected end of JSON input")
	}
	return newError(err, "%s: %v", name, err)
}

func positionError(name string, data []byte, offset int64, cause error, msg string) error {
	line, col := lineCol(data, offset)
	e := newError(cause, "%s: line %d, column %d: %s", name, line, col, msg)
	e.File, e.Line, e.Column = name, line, col
	return e
}

// lineCol converts a byte offset into a 1-based line and column.
func lineCol(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = 1 + bytes.Count(before, []byte{'\n'})
	col = int(offset) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlError turns a yaml.v3 error into an *Error naming the file and line.
func yamlError(name string, err error) error {
	if errors.Is(err, errEmptyFile) {
		return newError(err, "%s: empty file", name)
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	lines := strings.Split(msg, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	msg = strings.ReplaceAll(strings.Join(lines, "; "), "into policy.SubjectPolicy", "into a subject policy")
	e := newError(err, "%s: %s", name, msg)
	e.File = name
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if n, convErr := strconv.Atoi(m[1]); convErr == nil {
			e.Line = n
		}
	}
	return e
}

// yamlKeysAreNames refuses a mapping key that YAML reads as something
// other than a string (1, 0x1, 1.0, true, ~, null): as a JSON member name
// it would be respelled (null as "<nil>", 0x1F as "31"), and two spellings
// of one value (1 and 0x1, true and True) would be one member, the last
// winning. Merge keys (<<) are kept. Aliases are not followed: their
// anchors are checked where they stand.
func yamlKeysAreNames(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			target := k
			if k.Kind == yaml.AliasNode && k.Alias != nil {
				target = k.Alias
			}
			if target.Kind != yaml.ScalarNode || target.ShortTag() != "!!str" && target.ShortTag() != "!!merge" {
				return fmt.Errorf("line %d: mapping key %s is not a string (YAML reads it as %s): quote it", k.Line,
					strconv.Quote(target.Value), strings.TrimPrefix(target.ShortTag(), "!!"))
			}
		}
	}
	if n.Kind == yaml.AliasNode {
		return nil
	}
	for _, c := range n.Content {
		if err := yamlKeysAreNames(c); err != nil {
			return err
		}
	}
	return nil
}

// yamlToJSONValue makes a decoded YAML value encodable as JSON: mapping
// keys become strings and non-finite numbers are refused.
func yamlToJSONValue(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := yamlToJSONValue(e)
			if err != nil {
				return nil, err
			}
			x[k] = c
		}
		return x, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			c, err := yamlToJSONValue(e)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(k)] = c
		}
		return out, nil
	case []any:
		for i, e := range x {
			c, err := yamlToJSONValue(e)
			if err != nil {
				return nil, err
			}
			x[i] = c
		}
		return x, nil
	}
	return v, nil
}

func asObject(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = e
		}
		return out, true
	}
	return nil, false
}

// unknownFields walks a generically decoded document beside the Go type it
// was decoded into and appends the paths of keys that no field took,
// matching keys to the fields' json tags (fromJSON) or yaml tags exactly
// (a JSON member in another case was refused when it was decoded).
func unknownFields(v any, t reflect.Type, at string, fromJSON bool, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := asObject(v)
		if !ok {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			f, ok := structField(t, k, fromJSON)
			if !ok {
				*out = append(*out, joinField(at, k))
				continue
			}
			unknownFields(obj[k], f.Type, joinField(at, k), fromJSON, out)
		}
	case reflect.Map:
		obj, ok := asObject(v)
		if !ok {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			unknownFields(obj[k], t.Elem(), joinField(at, k), fromJSON, out)
		}
	case reflect.Slice:
		list, ok := v.([]any)
		if !ok {
			return
		}
		for i, e := range list {
			unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", at, i), fromJSON, out)
		}
	}
}

func structField(t reflect.Type, key string, fromJSON bool) (reflect.StructField, bool) {
	tag := "yaml"
	if fromJSON {
		tag = "json"
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// caseVariantOf reports whether the unknown field at path (as
// unknownFields writes it: "data.ForbiddenFields",
// "policy.publish[0].Principals") names a field of its struct in another
// case, and that field's name.
func caseVariantOf(t reflect.Type, path string) (string, bool) {
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		name, _, _ := strings.Cut(seg, "[")
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			if i == len(segs)-1 {
				for j := range t.NumField() {
					tag, _, _ := strings.Cut(t.Field(j).Tag.Get("yaml"), ",")
					if tag != "" && tag != name && strings.EqualFold(tag, name) {
						return tag, true
					}
				}
				return "", false
			}
			f, ok := structField(t, name, false)
			if !ok {
				return "", false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return "", false
		}
		for n := strings.Count(seg, "["); n > 0 && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array); n-- {
			t = t.Elem()
		}
	}
	return "", false
}

func joinField(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}
