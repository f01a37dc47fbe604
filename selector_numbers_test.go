package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A role permission's routes scope what a principal may publish and
// receive (/tenant=…). A scope compared numbers by their decoded double,
// so beyond 2^53 distinct stored texts were one value: a principal scoped
// to /tenant=9007199254740992 could publish, and received, messages of
// tenant 9007199254740993, the tenant a receiver that reads numbers
// exactly sees. In a scope such a number is equal to no value: the scope
// cannot tell which number the message holds. (A subscription's own
// selector keeps matching by value, as docs/delivery.md says: it narrows
// what its subscriber asked for, it grants nothing.)
func TestScopesDoNotEquateInexactNumbers(t *testing.T) {
	tests := []struct {
		sel, data string
		inScope   bool
	}{
		{"/tenant=9007199254740992", `{"tenant":9007199254740993}`, false},
		{"/tenant=9007199254740992", `{"tenant":9007199254740992}`, false},
		{"/tenant=9007199254740992", `{"tenant":9.007199254740993e15}`, false},
		{"/tenant=-9007199254740992", `{"tenant":-9007199254740993}`, false},
		{"/tenant=1e+21", `{"tenant":1e21}`, false},
		{"/tenant=9007199254740993", `{"tenant":9007199254740993}`, false},
		// Exact numbers are equal by value, as in any selector.
		{"/tenant=9007199254740991", `{"tenant":9007199254740991}`, true},
		{"/tenant=9007199254740991", `{"tenant":9007199254740991.0}`, true},
		{"/tenant=-9007199254740991", `{"tenant":-9007199254740991}`, true},
		{"/n=3", `{"n":3.0}`, true},
		{"/n=2.5", `{"n":25e-1}`, true},
		{"/n=-0", `{"n":-0}`, true},
		// Strings are compared as text; presence needs no value.
		{"/tenant=9007199254740993", `{"tenant":"9007199254740993"}`, true},
		{"/tenant", `{"tenant":9007199254740993}`, true},
		{"/tenant=9007199254740992/kind=a", `{"tenant":9007199254740993,"kind":"a"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.sel+" "+tt.data, func(t *testing.T) {
			sel, err := ParseSelector(tt.sel)
			require.NoError(t, err)
			data, err := decodeValue([]byte(tt.data))
			require.NoError(t, err)
			var g permit
			g.setScope(OpPublish, sel)
			g.setScope(OpReceive, sel)
			require.Equal(t, tt.inScope, g.inScope(OpPublish, data), "publish")
			require.Equal(t, tt.inScope, g.inScope(OpReceive, data), "receive")
		})
	}
}
