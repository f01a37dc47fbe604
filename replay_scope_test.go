package pigeon_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// historySubject is a pubsub subject that keeps messages for replay. dave
// publishes on it; nobody else holds anything through the catalog unless a
// test's rules say so.
func historySubject(replay []pigeon.RuleSpec) pigeon.SubjectPolicy {
	return pigeon.SubjectPolicy{
		Name: "rooms.history", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		Replay: pigeon.ReplayPolicy{Allowed: true},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}},
			pigeon.OpReplay:  replay,
		},
	}
}

// A replay granted only through a role permission scoped to some routes
// never hands over a message outside them: a principal whose role lets it
// read room lobby never replays room attic's messages. Today such a
// replay is refused REPLAY_DENIED (docs/policy.md: a replay rule must also
// allow the principal); were it admitted, it would have to keep to the
// role's routes. Replay granted by a catalog rule is not scoped and hands
// over every room.
func TestReplayKeepsToTheRoutesARoleGrants(t *testing.T) {
	cases := []struct {
		name   string
		rules  []pigeon.RuleSpec
		perm   []pigeon.Operation
		rooms  []string // the rooms replayed, in order, when admitted
		refuse pigeon.Code
	}{
		{"replay and receive scoped by the role", nil, []pigeon.Operation{pigeon.OpReceive, pigeon.OpReplay}, []string{"lobby", "lobby"}, pigeon.CodeReplayDenied},
		{"replay scoped by the role, receive not held", nil, []pigeon.Operation{pigeon.OpReplay}, []string{"lobby", "lobby"}, pigeon.CodeReplayDenied},
		{"receive scoped by the role, no replay", nil, []pigeon.Operation{pigeon.OpReceive}, nil, pigeon.CodeReplayDenied},
		{"replay from a catalog rule naming the role", []pigeon.RuleSpec{{Effect: "allow", Roles: []string{"lobby-reader"}}}, []pigeon.Operation{pigeon.OpReceive}, []string{"lobby", "attic", "lobby"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := accessFixture(t, func(o *pigeon.Options) {
				o.Catalog.Subjects = append(o.Catalog.Subjects, historySubject(tc.rules))
			})
			e := f.e
			_, err := e.PutRole(ctx, pigeon.Role{Name: "lobby-reader", Permissions: []pigeon.Permission{
				{Subject: "rooms.history", Operations: tc.perm, Selector: "/room=lobby"},
			}})
			require.NoError(t, err)
			_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"lobby-reader"}})
			require.NoError(t, err)

			writer := f.connect("dave-token", "rooms.history")
			for _, room := range []string{"lobby", "attic", "lobby"} {
				m := chatIn(room, "hello "+room)
				m.Subject = "rooms.history"
				_, err := writer.Publish(ctx, m)
				require.NoError(t, err)
			}

			reader := f.connect("carol-token", "rooms.history")
			got, err := reader.Replay(ctx, pigeon.ReplayRequest{Subject: "rooms.history", Reason: "audit"})
			if err != nil || tc.refuse != "" {
				if err != nil {
					requireCode(t, err, tc.refuse)
					return
				}
				require.NotNil(t, tc.rooms, "admitted a replay the principal does not hold")
			}
			rooms := []string{}
			for _, m := range got {
				var d struct{ Room string }
				require.NoError(t, json.Unmarshal(m.Data, &d))
				rooms = append(rooms, d.Room)
			}
			require.Equal(t, tc.rooms, rooms)
		})
	}
}
