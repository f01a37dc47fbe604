package pigeon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestViewFailsClosed holds ContractInfo.View, which the engine reads
// stored contracts through, to fail closed on a scope it cannot read: an
// operation listed in Scope stays scoped whatever its selectors are.
func TestViewFailsClosed(t *testing.T) {
	lobby := map[string]any{"room": "lobby"}
	other := map[string]any{"room": "other"}
	for _, tc := range []struct {
		name    string
		scope   map[Operation][]string
		scoped  bool
		key     string
		inScope []bool // lobby, other
	}{
		{"no scope", nil, false, "", []bool{true, true}},
		{"one selector", map[Operation][]string{OpReceive: {"/room=lobby"}}, true, "/room=lobby", []bool{true, false}},
		{"empty list", map[Operation][]string{OpReceive: {}}, true, noRoute, []bool{false, false}},
		{"none parses", map[Operation][]string{OpReceive: {"room=lobby", ""}}, true, noRoute, []bool{false, false}},
		{"one of two parses", map[Operation][]string{OpReceive: {"/room=lobby", "not a selector"}}, true, "/room=lobby", []bool{true, false}},
		{"another operation", map[Operation][]string{OpPublish: {"junk"}}, false, "", []bool{true, true}},
		{"not an operation", map[Operation][]string{"frobnicate": {}, Operation("receive "): {"junk"}}, false, "", []bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := ContractInfo{ID: "c1", Subjects: []ContractSubject{{Name: "chat", Operations: []Operation{OpReceive, OpPublish}, Scope: tc.scope}}}
			g := info.View().(*contract).permits["chat"]
			require.Equal(t, tc.scoped, g.scoped(OpReceive))
			require.Equal(t, tc.key, g.scopeKey(OpReceive))
			require.Equal(t, tc.inScope[0], g.inScope(OpReceive, lobby))
			require.Equal(t, tc.inScope[1], g.inScope(OpReceive, other))
			for _, op := range Operations {
				if op != OpReceive && tc.scope[op] == nil {
					require.False(t, g.scoped(op), "%s", op)
				}
			}
		})
	}
}
