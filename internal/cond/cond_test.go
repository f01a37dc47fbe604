package cond

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func testPrincipal() Principal {
	return Principal{
		ID:         "spiffe://merchant-prod/ns/checkout/sa/checkout-api",
		Attributes: map[string]string{"team": "payments", "tier": "gold"},
		Roles:      []string{"writer", "auditor"},
	}
}

func testMessage() Message {
	return Message{
		ID: "m-1", Type: "payment.authorization.requested", Source: "spiffe://merchant-prod/ns/checkout/sa/checkout-api",
		Subject: "payments.authorize", Intent: "authorize_payment", Region: "uk", Reason: "",
		Classification: "pci",
		Data: map[string]any{
			"amount": 125.5, "currency": "GBP", "count": 3.0, "approved": true,
			"items": []any{map[string]any{"sku": "a"}, map[string]any{"sku": "b"}},
			"card":  map[string]any{"last4": "4242"},
		},
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		expr string
		msg  string
	}{
		{"", "empty CEL expression"},
		{"   ", "empty CEL expression"},
		{"principal.id == 1", "1:14: found no matching overload for '_==_' applied to '(string, int)'"},
		{`user == "x"`, "1:1: undeclared reference to 'user'"},
		{`principal.name == "x"`, "undefined field 'name'"},
		{`message.tenant == "x"`, "undefined field 'tenant'"},
		{`principal.attributes.team == 1`, "no matching overload"},
		{`"admin" in principal.roles[0]`, "no matching overload"},
		{`message.data.amount`, "result is dyn, want bool"},
		{`message.region`, "result is string, want bool"},
		{`size(principal.roles)`, "result is int, want bool"},
		{`message.region == `, "Syntax error"},
		{`pigeon.Principal{id: "x"} == principal`, ""}, // construction is refused at evaluation, see below
		{strings.Repeat("a", celMaxExprLen+1), "expression code point size exceeds limit"},
		{strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), ""},
		{strings.Repeat("[", 300) + "true" + strings.Repeat("]", 300) + " == []", "CEL: expression recursion limit exceeded"},
	}
	for _, tt := range tests {
		name := tt.expr
		if len(name) > 40 {
			name = name[:40]
		}
		t.Run(name, func(t *testing.T) {
			c, err := Compile(tt.expr)
			if tt.msg == "" {
				if err == nil {
					require.NotNil(t, c)
				}
				return
			}
			require.Error(t, err)
			require.ErrorContains(t, err, tt.msg)
			require.NotContains(t, err.Error(), "\n", "issues are rendered on one line")
		})
	}
}

func TestConditionEval(t *testing.T) {
	tests := []struct {
		expr string
		want bool
	}{
		{`message.data.amount < 10000 && principal.attributes.team == "payments"`, true},
		{`message.data.amount > 10000 || principal.attributes.team != "payments"`, false},
		{`message.data.count == 3`, true}, // JSON numbers are doubles; CEL compares across numeric types
		{`message.data.approved == true`, true},
		{`message.data.currency in ["GBP", "EUR"]`, true},
		{`message.data.card.last4.matches("^[0-9]{4}$")`, true},
		{`size(message.data.items) == 2 && message.data.items.all(i, has(i.sku))`, true},
		{`message.data.items.exists(i, i.sku == "c")`, false},
		{`has(message.data.amount) && !has(message.data.refund)`, true},
		{`"writer" in principal.roles`, true},
		{`principal.roles.exists(r, r == "admin")`, false},
		{`principal.id.startsWith("spiffe://merchant-prod/")`, true},
		{`"tier" in principal.attributes && principal.attributes.tier == "gold"`, true},
		{`has(principal.attributes.region)`, false},
		{`message.region == "uk" && message.classification == "pci"`, true},
		{`message.intent == "authorize_payment" && message.subject == "payments.authorize"`, true},
		{`message.type.endsWith(".requested") && message.id == "m-1"`, true},
		{`message.source == principal.id`, true},
		{`message.reason == ""`, true},
		{`has(message.reason)`, false},
		{`has(message.region)`, true},
		{`principal == principal`, true},
		{`true`, true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			c, err := Compile(tt.expr)
			require.NoError(t, err)
			require.Equal(t, tt.expr, c.String())
			got, err := c.Eval(&Vars{testPrincipal(), testMessage()})
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestConditionEvalErrors(t *testing.T) {
	tests := []struct {
		expr string
		msg  string
	}{
		{`message.data.refund > 0`, "no such key: refund"},
		{`message.data.currency > 1`, "no such overload"},
		{`principal.attributes.missing == "x"`, "no such key: missing"},
		{`pigeon.Principal{id: "x"} == principal`, "cannot be constructed"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			c, err := Compile(tt.expr)
			require.NoError(t, err)
			got, err := c.Eval(&Vars{testPrincipal(), testMessage()})
			require.ErrorContains(t, err, tt.msg)
			require.False(t, got)
			require.NotContains(t, err.Error(), "125.5", "errors never carry payload values")
		})
	}
}

func TestConditionRawJSONData(t *testing.T) {
	c, err := Compile(`message.data.amount > 100 && message.data.amount < 200 && message.data.tags[0] == "x"`)
	require.NoError(t, err)
	m := testMessage()
	for _, data := range []any{
		json.RawMessage(`{"amount": 150, "tags": ["x"]}`),
		[]byte(`{"amount": 150, "tags": ["x"]}`),
	} {
		m.Data = data
		got, err := c.Eval(&Vars{testPrincipal(), m})
		require.NoError(t, err)
		require.True(t, got)
	}
	m.Data = json.RawMessage(`{"amount": `)
	_, err = c.Eval(&Vars{testPrincipal(), m})
	require.ErrorContains(t, err, "unexpected end of JSON input")

	// Empty data is null: field access fails, presence tests do not.
	m.Data = nil
	has, err := Compile(`!has(message.data.amount)`)
	require.NoError(t, err)
	_, err = c.Eval(&Vars{testPrincipal(), m})
	require.Error(t, err)
	got, err := has.Eval(&Vars{testPrincipal(), Message{Data: map[string]any{}}})
	require.NoError(t, err)
	require.True(t, got)
}

func TestConditionCostLimit(t *testing.T) {
	list := "[" + strings.TrimSuffix(strings.Repeat("1,", 50), ",") + "]"
	expr := list + ".all(a, " + list + ".all(b, " + list + ".all(c, " + list + ".all(d, a+b+c+d > 0))))"
	c, err := Compile(expr)
	require.NoError(t, err)
	_, err = c.Eval(&Vars{Principal{}, Message{}})
	require.ErrorContains(t, err, "cost limit exceeded", "the limit stops it, not its end (50⁴ steps)")

	// Comprehensions over the message's data are limited the same way.
	c, err = Compile(`message.data.items.all(a, message.data.items.all(b, message.data.items.all(c, a + b + c > 0)))`)
	require.NoError(t, err)
	items := make([]any, 200)
	for i := range items {
		items[i] = float64(i + 1)
	}
	_, err = c.Eval(&Vars{Principal{}, Message{Data: map[string]any{"items": items}}})
	require.ErrorContains(t, err, "cost limit exceeded")
}

func TestConditionConcurrent(t *testing.T) {
	c, err := Compile(`message.data.amount < 10000 && principal.attributes.team == "payments"`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			p := testPrincipal()
			if g%2 == 1 {
				p.Attributes = map[string]string{"team": "other"}
			}
			for range 200 {
				got, err := c.Eval(&Vars{p, testMessage()})
				if err != nil || got != (g%2 == 0) {
					t.Errorf("goroutine %d: got %v, %v", g, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkConditionEval(b *testing.B) {
	for _, bm := range []struct{ name, expr string }{
		{"typical", `message.data.amount < 10000 && principal.attributes.team == "payments"`},
		{"roles", `"writer" in principal.roles && message.region == "uk"`},
		{"comprehension", `message.data.items.all(i, has(i.sku))`},
	} {
		b.Run(bm.name, func(b *testing.B) {
			c, err := Compile(bm.expr)
			require.NoError(b, err)
			v := &Vars{testPrincipal(), testMessage()}
			b.ReportAllocs()
			for b.Loop() {
				ok, err := c.Eval(v)
				if !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(`message.data.amount < 10000 && principal.attributes.team == "payments"`); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCompileCondition checks that no expression panics the compiler or
// the evaluator.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`message.data.amount < 10000 && principal.attributes.team == "payments"`,
		`"writer" in principal.roles`,
		`message.data.items.all(i, has(i.sku))`,
		`principal.id == 1`,
		`has(message.data.x) ? message.data.x > 1 : false`,
	} {
		f.Add(s)
	}
	p, m := testPrincipal(), testMessage()
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := Compile(expr)
		if err != nil {
			return
		}
		_, _ = c.Eval(&Vars{p, m})
	})
}

// A condition whose work grows with the data's sizes rather than with the
// expression (concatenating a large string of the data to itself) stops at
// the cost limit: message.data is dynamic, and
// cel-go priced such calls as one unit whatever their operands, so a
// filter of 30 concatenations of a 1 MiB string ran for half a second
// (200 of them, for seconds) within the limit. Small operands stay cheap.
func TestConditionCostGrowsWithTheData(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	tests := []struct {
		name, expr string
		data       map[string]any
		limited    bool
	}{
		{"concatenation of a large string", "size(message.data.s" + strings.Repeat(" + message.data.s", 30) + ") > 0", map[string]any{"s": big}, true},
		{"pattern over a large string", `message.data.s.matches("` + strings.Repeat("(x|y)", 200) + `z")`, map[string]any{"s": big}, true},
		{"pattern over a small string", `message.data.s.matches("^(x|y)+$") && matches(message.type, "^t")`, map[string]any{"s": "xyyx"}, false},
		{"pattern from the data over a large string", `message.data.s.matches(message.data.p)`, map[string]any{"s": big, "p": strings.Repeat("(x|y)", 200) + "z"}, true},
		{"pattern from the data over a small string", `message.data.s.matches(message.data.p)`, map[string]any{"s": "xy", "p": "^x"}, false},
		{"concatenation of small strings", `message.data.first + " " + message.data.last == "Ada Lovelace"`, map[string]any{"first": "Ada", "last": "Lovelace"}, false},
		{"one large concatenation", `size(message.data.s + "!") > 0`, map[string]any{"s": big}, false},
		{"contains on a large string", `message.data.s.contains("x")`, map[string]any{"s": big}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compile(tc.expr)
			require.NoError(t, err)
			ok, err := c.Eval(&Vars{Message: Message{Type: "t", Data: tc.data}})
			if tc.limited {
				require.Error(t, err)
				require.Regexp(t, "cost limit|more work than a condition may do", err.Error())
			} else {
				require.True(t, ok)
				require.NoError(t, err)
			}
		})
	}
}
