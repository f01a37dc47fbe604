package pigeon

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store/memory"
)

// TestPermissionWithBadSelectorGrantsNothing: a role permission whose
// selector does not parse grants nothing on every path that reads the
// roles (negotiation and each later check go through permissionScope):
// not the operation alone, and never a scope wider than the permissions
// that parse. Load leaves such a permission out; permissionScope, which
// the directory's maps reach by no other way, ignores one all the same.
func TestPermissionWithBadSelectorGrantsNothing(t *testing.T) {
	ctx := context.Background()
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	require.NoError(t, st.Put(ctx, bucketRoles, "member", []byte(`{"name":"member","permissions":[
		{"subject":"rooms.chat","operations":["publish"],"selector":"room=lobby"},
		{"subject":"rooms.chat","operations":["receive"],"selector":"room=kitchen"},
		{"subject":"rooms.chat","operations":["receive"],"selector":"/room=lobby"}]}`)))
	var d directory
	require.NoError(t, d.load(ctx, st, slog.New(slog.NewTextHandler(io.Discard, nil))))

	stored := &Role{Name: "raw", Permissions: []Permission{
		{Subject: "rooms.chat", Operations: []Operation{OpPublish}, Selector: "room=lobby"},
		{Subject: "rooms.chat", Operations: []Operation{OpReceive}, Selector: "room=kitchen"},
		{Subject: "rooms.chat", Operations: []Operation{OpReceive}, Selector: "/room=lobby"}}}
	for name, roles := range map[string]map[string]*Role{
		"loaded":            d.roles,
		"in the maps as is": {"raw": stored},
	} {
		t.Run(name, func(t *testing.T) {
			dd := directory{roles: roles}
			var names []string
			for n := range roles {
				names = append(names, n)
			}
			_, ok := dd.permissionScope(names, "rooms.chat", OpPublish)
			require.False(t, ok, "a selector that does not parse grants no publish")
			scope, ok := dd.permissionScope(names, "rooms.chat", OpReceive)
			require.True(t, ok)
			require.Len(t, scope, 1, "receive is scoped, by the one selector that parses")
			require.Equal(t, "/room=lobby", scope[0].String())
		})
	}
}
