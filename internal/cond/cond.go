// Package cond compiles and evaluates the broker's CEL conditions: the
// `when` of a rule, the `expr` of a data-quality rule and a subscription's
// filter. Its errors are plain; the broker gives them a decision code.
package cond

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// Conditions see two variables, typed so that the checker catches misspelt fields
// and wrong comparisons at load time:
//
//	principal  pigeon.Principal{id string, attributes map(string, string), roles list(string)}
//	message    pigeon.Message{data dyn, id, type, source, subject, intent,
//	                          region, reason, classification string}
//
// message.data is dynamic (it is the publisher's JSON), so field access into
// it is checked only at evaluation.

// Limits that keep a hostile or careless expression from hurting the broker.
const (
	// celCostLimit bounds the work of one evaluation of an expression with
	// comprehensions. A per-element check such as
	// message.data.items.all(i, i.qty > 0) costs 5–9 per element, so lists
	// of several thousand elements fit; a pathological nesting of
	// comprehensions stops after about 10 ms.
	celCostLimit = 50_000
	// celMaxExprLen bounds the source length, in code points. (The
	// parser's defaults bound the nesting depth, 250, and the node count,
	// which keeps checking and planning off deep stacks.)
	celMaxExprLen = 4096
)

// Principal is what a condition sees as `principal`.
type Principal struct {
	ID         string
	Attributes map[string]string
	Roles      []string
}

// Message is what a condition sees as `message`. Data is the decoded
// JSON value of the message's data (map[string]any, []any, string, float64,
// bool or nil); json.RawMessage and []byte are accepted too and decoded on
// first use, once per evaluation.
type Message struct {
	ID, Type, Source, Subject, Intent, Region, Reason, Classification string
	Data                                                              any
}

// Vars are the variables of one evaluation.
type Vars struct {
	Principal Principal
	Message   Message
}

// Condition is a compiled, type-checked CEL expression whose result is a
// bool. It is immutable and safe for concurrent use.
type Condition struct {
	src string
	prg cel.Program
}

// String returns the source text.
func (c *Condition) String() string { return c.src }

// ErrEnvironment marks a failure to build the CEL environment itself: a
// fault of the program, not of the expression.
var ErrEnvironment = errors.New("CEL environment")

// Compile parses and type-checks expr against the policy environment and
// plans it. The result type must be bool. The error text carries the CEL
// issues on one line; a failure to build the environment wraps
// ErrEnvironment.
func Compile(expr string) (*Condition, error) {
	env, err := celPolicyEnv()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEnvironment, err)
	}
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("empty CEL expression")
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, errors.New("CEL: " + celIssues(iss))
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return nil, fmt.Errorf(
			"CEL: result is %s, want bool (compare dynamic values explicitly, e.g. message.data.flag == true)",
			ast.OutputType())
	}
	opts := []cel.ProgramOption{regexConstants(), cel.EvalOptions(cel.OptOptimize)}
	if hasComprehension(ast) || hasSizedCall(ast) {
		// Only comprehensions (all, exists, exists_one, map, filter) and
		// calls whose work grows with their operands (sizedCost) can make
		// the work grow faster than the expression and the message.
		// Tracking the cost costs ~1 µs per evaluation, so it is paid only
		// where it is needed.
		opts = append(opts, cel.CostLimit(celCostLimit), cel.CostTracking(sizedCost{}))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, fmt.Errorf("CEL: %w", err)
	}
	return &Condition{src: expr, prg: prg}, nil
}

// celIssues renders CEL issues on one line: "1:14: message; 1:20: message".
func celIssues(iss *cel.Issues) string {
	errs := iss.Errors()
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		if e.Location == nil || e.Location.Line() <= 0 {
			parts = append(parts, e.Message)
			continue
		}
		parts = append(parts, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
	}
	return strings.Join(parts, "; ")
}

// sizedCalls are the functions whose work grows with their operands'
// sizes: concatenation copies both, matches runs the pattern over the
// text, the others scan it.
var sizedCalls = []string{operators.Add, "matches", "contains", "startsWith", "endsWith"}

func hasSizedCall(a *cel.Ast) bool {
	nav := celast.NavigateAST(a.NativeRep())
	for _, fn := range sizedCalls {
		if len(celast.MatchDescendants(nav, celast.FunctionMatcher(fn))) > 0 {
			return true
		}
	}
	return false
}

// sizedCost prices the sizedCalls by their operands at evaluation, a unit
// for each KiB a scan reads and each 128 bytes a concatenation allocates
// and copies (a unit is about what a comprehension's element costs, a
// fifth of a microsecond), whatever overload they run as. The price is
// added once a call returns: the limit stops the expression after the
// call that crosses it. On
// message.data, which is dynamic, the checker resolves no overload, and
// cel-go's own pricing, by overload, takes such a call as one unit: a
// filter concatenating a 1 MiB string of the data to itself 200 times ran
// for seconds within the cost limit.
type sizedCost struct{}

func (sizedCost) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	var n uint64
	switch function {
	case operators.Add:
		n = valSize(result)/128 + 1 // the copy it made, and the allocation
	case "matches":
		if len(args) != 2 {
			return nil
		}
		n = (valSize(args[0])/1024 + 1) * (valSize(args[1])/4 + 1) // RE2: the text once per state
	case "contains", "startsWith", "endsWith":
		if len(args) != 2 {
			return nil
		}
		n = (valSize(args[0])+valSize(args[1]))/1024 + 1
	default:
		return nil
	}
	return &n
}

// valSize is the length of a string or bytes value, the element count of
// a list or map, and 0 for anything else.
func valSize(v ref.Val) uint64 {
	switch x := v.(type) {
	case types.String:
		return uint64(len(x))
	case types.Bytes:
		return uint64(len(x))
	case traits.Sizer:
		if n, ok := x.Size().(types.Int); ok && n > 0 {
			return uint64(n)
		}
	}
	return 0
}

func hasComprehension(a *cel.Ast) bool {
	nav := celast.NavigateAST(a.NativeRep())
	return len(celast.MatchDescendants(nav, celast.KindMatcher(celast.ComprehensionKind))) > 0
}

// Eval runs the condition with the variables v. A runtime error (a missing key in message.data,
// a type mismatch inside dynamic data, the cost limit) is returned as err
// with false; the caller decides whether that fails open or closed. Error
// texts come from CEL: they name keys and types, but a few (for example
// timestamp("…") on a bad string, or a key taken from the data) quote
// payload text, so do not copy them into audit records or replies.
func (c *Condition) Eval(v *Vars) (bool, error) {
	act := activationPool.Get().(*celActivation)
	act.principal = v.Principal
	act.message = celMessageBinding{Message: v.Message}
	out, _, err := c.prg.Eval(act)
	*act = celActivation{}
	activationPool.Put(act)
	if err != nil {
		return false, fmt.Errorf("CEL %q: %w", c.src, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("CEL %q: result is %s, want bool", c.src, out.Type().TypeName())
	}
	return bool(b), nil
}

// celActivation binds the two variables without building a map per call.
type celActivation struct {
	principal Principal
	message   celMessageBinding
}

// celMessageBinding caches the decoded form of raw JSON data for the length
// of one evaluation.
type celMessageBinding struct {
	Message
	decoded bool
	data    any
	dataErr error
}

var activationPool = sync.Pool{New: func() any { return new(celActivation) }}

// ResolveName implements interpreter.Activation.
func (a *celActivation) ResolveName(name string) (any, bool) {
	switch name {
	case "principal":
		return &a.principal, true
	case "message":
		return &a.message, true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *celActivation) Parent() interpreter.Activation { return nil }

var _ interpreter.Activation = (*celActivation)(nil)

func (b *celMessageBinding) dataValue() (any, error) {
	switch d := b.Data.(type) {
	case json.RawMessage:
		return b.decode(d)
	case []byte:
		return b.decode(d)
	}
	return b.Data, nil
}

func (b *celMessageBinding) decode(raw []byte) (any, error) {
	if !b.decoded {
		b.decoded = true
		if len(raw) > 0 {
			b.dataErr = json.Unmarshal(raw, &b.data)
		}
	}
	return b.data, b.dataErr
}

// celField is one field of a CEL object type.
type celField struct {
	typ *types.Type
	get func(obj any) (any, error)
}

// celObjectType declares a struct type to the CEL checker and tells the
// interpreter how to read its fields from a Go value without reflection.
// It implements ref.Type and types.StructTypeDescriptor.
type celObjectType struct {
	name   string
	goType reflect.Type
	fields map[string]celField
}

var (
	_ ref.Type                   = (*celObjectType)(nil)
	_ types.StructTypeDescriptor = (*celObjectType)(nil)
)

func (t *celObjectType) HasTrait(trait int) bool {
	return trait&(traits.FieldTesterType|traits.IndexerType) == trait
}
func (t *celObjectType) TypeName() string          { return t.name }
func (t *celObjectType) ReflectType() reflect.Type { return t.goType }

func (t *celObjectType) FieldNames() []string {
	names := make([]string, 0, len(t.fields))
	for n := range t.fields {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (t *celObjectType) FindFieldType(name string) (*types.FieldType, bool) {
	f, ok := t.fields[name]
	if !ok {
		return nil, false
	}
	return &types.FieldType{
		Type:    f.typ,
		IsSet:   func(obj any) bool { v, err := f.get(obj); return err == nil && !isZeroField(v) },
		GetFrom: f.get,
	}, true
}

func (t *celObjectType) NewValue(types.Adapter, map[string]ref.Val) ref.Val {
	return types.NewErr("%s values cannot be constructed in policy expressions", t.name)
}

func (t *celObjectType) Adapt(adapter types.Adapter, value any) ref.Val {
	return &celObject{adapter: adapter, typ: t, val: value}
}

func isZeroField(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]string:
		return len(x) == 0
	case []string:
		return len(x) == 0
	}
	return false
}

// celObject is a principal or message used as a whole value (for example
// compared with ==). Field reads normally bypass it.
type celObject struct {
	adapter types.Adapter
	typ     *celObjectType
	val     any
}

func (o *celObject) ConvertToNative(typeDesc reflect.Type) (any, error) {
	if reflect.TypeOf(o.val) == typeDesc {
		return o.val, nil
	}
	return nil, fmt.Errorf("type conversion error from %s to %v", o.typ.name, typeDesc)
}

func (o *celObject) ConvertToType(typeVal ref.Type) ref.Val {
	if typeVal == types.TypeType {
		return types.NewObjectType(o.typ.name)
	}
	if typeVal.TypeName() == o.typ.name {
		return o
	}
	return types.NewErr("type conversion error from %s to %s", o.typ.name, typeVal.TypeName())
}

func (o *celObject) Equal(other ref.Val) ref.Val {
	oo, ok := other.(*celObject)
	return types.Bool(ok && oo.typ == o.typ && reflect.DeepEqual(o.val, oo.val))
}

func (o *celObject) Type() ref.Type { return o.typ }
func (o *celObject) Value() any     { return o.val }

func (o *celObject) Get(index ref.Val) ref.Val {
	name, ok := index.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(index)
	}
	f, ok := o.typ.fields[string(name)]
	if !ok {
		return types.NewErr("no such field: %s", name)
	}
	v, err := f.get(o.val)
	if err != nil {
		return types.WrapErr(err)
	}
	return o.adapter.NativeToValue(v)
}

func (o *celObject) IsSet(field ref.Val) ref.Val {
	name, ok := field.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(field)
	}
	f, ok := o.typ.fields[string(name)]
	if !ok {
		return types.NewErr("no such field: %s", name)
	}
	v, err := f.get(o.val)
	return types.Bool(err == nil && !isZeroField(v))
}

var (
	_ ref.Val            = (*celObject)(nil)
	_ traits.Indexer     = (*celObject)(nil)
	_ traits.FieldTester = (*celObject)(nil)
)

func principalField(get func(*Principal) any) func(any) (any, error) {
	return func(obj any) (any, error) {
		p, ok := obj.(*Principal)
		if !ok {
			return nil, fmt.Errorf("principal: unexpected %T", obj)
		}
		return get(p), nil
	}
}

func messageField(get func(*celMessageBinding) any) func(any) (any, error) {
	return func(obj any) (any, error) {
		m, ok := obj.(*celMessageBinding)
		if !ok {
			return nil, fmt.Errorf("message: unexpected %T", obj)
		}
		return get(m), nil
	}
}

var principalType = &celObjectType{
	name:   "pigeon.Principal",
	goType: reflect.TypeFor[*Principal](),
	fields: map[string]celField{
		"id":         {types.StringType, principalField(func(p *Principal) any { return p.ID })},
		"attributes": {types.NewMapType(types.StringType, types.StringType), principalField(func(p *Principal) any { return p.Attributes })},
		"roles":      {types.NewListType(types.StringType), principalField(func(p *Principal) any { return p.Roles })},
	},
}

var messageType = &celObjectType{
	name:   "pigeon.Message",
	goType: reflect.TypeFor[*celMessageBinding](),
	fields: map[string]celField{
		"id":             {types.StringType, messageField(func(m *celMessageBinding) any { return m.ID })},
		"type":           {types.StringType, messageField(func(m *celMessageBinding) any { return m.Type })},
		"source":         {types.StringType, messageField(func(m *celMessageBinding) any { return m.Source })},
		"subject":        {types.StringType, messageField(func(m *celMessageBinding) any { return m.Subject })},
		"intent":         {types.StringType, messageField(func(m *celMessageBinding) any { return m.Intent })},
		"region":         {types.StringType, messageField(func(m *celMessageBinding) any { return m.Region })},
		"reason":         {types.StringType, messageField(func(m *celMessageBinding) any { return m.Reason })},
		"classification": {types.StringType, messageField(func(m *celMessageBinding) any { return m.Classification })},
		"data": {types.DynType, func(obj any) (any, error) {
			m, ok := obj.(*celMessageBinding)
			if !ok {
				return nil, fmt.Errorf("message: unexpected %T", obj)
			}
			return m.dataValue()
		}},
	},
}

// celPolicyEnv returns the one shared environment, built on first use.
var celPolicyEnv = sync.OnceValues(func() (*cel.Env, error) {
	opts := append(celMatches(),
		cel.Types(principalType, messageType),
		cel.Variable("principal", cel.ObjectType(principalType.name)),
		cel.Variable("message", cel.ObjectType(messageType.name)),
		cel.ParserExpressionSizeLimit(celMaxExprLen),
	)
	return cel.NewCustomEnv(opts...)
})
