package pigeon_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A pull ack on a pubsub subject is a receipt of the message it names
// (delivery.acked, naming the acker), so it is recorded only for a message
// the acker's pull cursor handed it: not for one outside the routes its
// receive is scoped to, nor one it has not pulled yet. Before, any
// principal holding ack could put its name on the receipts of any message
// of the subject whose id it knew.
func TestPubSubAckIsAReceiptOnlyOfWhatWasPulled(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.feed", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}},
			},
		})
	})
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "lobby-reader", Permissions: []pigeon.Permission{
		{Subject: "rooms.feed", Operations: []pigeon.Operation{pigeon.OpReceive, pigeon.OpAck}, Selector: "/room=lobby"},
	}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"lobby-reader"}})
	require.NoError(t, err)

	writer := f.connect("dave-token", "rooms.feed")
	publish := func(room string) string {
		m := chatIn(room, "hello")
		m.Subject = "rooms.feed"
		res, err := writer.Publish(ctx, m)
		require.NoError(t, err)
		return res.Message.ID
	}
	lobby, attic := publish("lobby"), publish("attic")
	reader := f.connect("carol-token", "rooms.feed")

	ackedBy := func(id string) []string {
		rs, err := e.Receipts(ctx, id)
		require.NoError(t, err)
		who := []string{}
		for _, r := range rs {
			if r.Event == pigeon.EventDeliveryAcked {
				who = append(who, r.Principal)
			}
		}
		return who
	}

	never := "msg_never_seen"
	cases := []struct {
		name  string
		pull  bool // pull before the ack
		id    *string
		code  pigeon.Code // the refusal, if any
		acked []string
	}{
		{"a message not pulled yet", false, &lobby, pigeon.CodeAckNotAllowed, []string{}},
		// Answered as an id never seen: the answer does not tell a
		// message outside the scope exists.
		{"a message outside the receive scope", true, &attic, pigeon.CodeMessageNotFound, []string{}},
		{"an id never seen", true, &never, pigeon.CodeMessageNotFound, []string{}},
		{"a message pulled", true, &lobby, "", []string{carol}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.pull {
				_, err := reader.Receive(ctx, "rooms.feed", 10)
				require.NoError(t, err)
			}
			err := reader.Ack(ctx, "rooms.feed", *tc.id)
			if tc.code != "" {
				requireCode(t, err, tc.code)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.acked, ackedBy(*tc.id))
		})
	}

	// Nor does a look-up of a message by id (Engine.Message, which a
	// transport uses to read a delivery's data again).
	c := reader.(interface{ Caller() pigeon.Caller }).Caller()
	_, err = e.Message(ctx, c, attic)
	requireCode(t, err, pigeon.CodeMessageNotFound)
	m, err := e.Message(ctx, c, lobby)
	require.NoError(t, err)
	require.Equal(t, lobby, m.ID)
}
