package cond

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A condition given ExactData judges each number as written: one a double
// holds faithfully compares as usual; any other makes every expression
// that reads it fail, so a deny rule cannot be dodged (and an allow rule
// cannot be met) by digits the double drops.
func TestExactDataNumbers(t *testing.T) {
	tests := []struct {
		expr, data string
		want       bool // when the condition evaluates
		fails      bool
	}{
		{`message.data.qty <= 100.0`, `{"qty":100}`, true, false},
		{`message.data.qty <= 100.0`, `{"qty":99.99}`, true, false},
		{`message.data.qty <= 100.0`, `{"qty":100.0000000000000001}`, false, true},
		{`message.data.qty > 100.0`, `{"qty":100.0000000000000001}`, false, true},
		{`message.data.tenant == 9007199254740992.0`, `{"tenant":9007199254740991}`, false, false},
		{`message.data.tenant == 9007199254740991.0`, `{"tenant":9007199254740991}`, true, false},
		{`message.data.tenant == 9007199254740992.0`, `{"tenant":9007199254740993}`, false, true},
		{`message.data.tenant != 9007199254740992.0`, `{"tenant":9007199254740993}`, false, true},
		{`message.data.id == 1234567890123456.0`, `{"id":1234567890123456}`, true, false},
		{`message.data.items.all(i, i < 10.0)`, `{"items":[1,2,3.0000000000000000001]}`, false, true},
		{`message.data.x < 1.0`, `{"x":1e-400}`, false, true},
		// Other fields are read as usual.
		{`message.data.currency == "GBP"`, `{"currency":"GBP","qty":100.0000000000000001}`, true, false},
		{`has(message.data.qty)`, `{"qty":100.0000000000000001}`, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.expr+" "+tt.data, func(t *testing.T) {
			c, err := Compile(tt.expr)
			require.NoError(t, err)
			data, err := ExactData([]byte(tt.data))
			require.NoError(t, err)
			m := testMessage()
			m.Data = data
			got, err := c.Eval(&Vars{testPrincipal(), m})
			if tt.fails {
				require.Error(t, err)
				require.False(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
