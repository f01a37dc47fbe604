package pigeon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// askSubject is a request/reply subject: dave asks, and nobody receives
// through the catalog; a test's roles say who answers which rooms.
func askSubject() pigeon.SubjectPolicy {
	return pigeon.SubjectPolicy{
		Name: "rooms.ask", Version: "v1", Mode: pigeon.ModeRequestReply, Intents: []string{"chat"},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{
			pigeon.OpPublish: {{Effect: "allow", Principals: []string{dave}}},
		},
	}
}

func askIn(id, room string) *pigeon.Message {
	m := chatIn(room, "who is there?")
	m.ID, m.Subject = id, "rooms.ask"
	return m
}

func answerTo(id, room string) *pigeon.Message {
	m := chatIn(room, "me")
	m.Subject, m.CorrelationID = "rooms.ask", id
	return m
}

// A replier whose receive is scoped to some routes answers only the
// requests within them: carol, who may receive room lobby's requests,
// cannot answer a request about the attic she was never handed (its id
// guessed, as a publisher-chosen id can be), so the requester never takes
// her answer for the attic's. Before, a reply needed receive on the
// subject alone, whatever the request held.
func TestReplyKeepsToTheRoutesTheReplierReceives(t *testing.T) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, askSubject())
	})
	_, err := f.e.PutRole(ctx, pigeon.Role{Name: "lobby-answerer", Permissions: []pigeon.Permission{
		{Subject: "rooms.ask", Operations: []pigeon.Operation{pigeon.OpReceive}, Selector: "/room=lobby"},
	}})
	require.NoError(t, err)
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"lobby-answerer"}})
	require.NoError(t, err)

	asker := f.connect("dave-token", "rooms.ask")
	answerer := f.connect("carol-token", "rooms.ask")

	cases := []struct {
		room   string
		refuse pigeon.Code // "": the reply reaches the requester
	}{
		{"attic", pigeon.CodePolicyDenied},
		{"lobby", ""},
	}
	for _, tc := range cases {
		t.Run(tc.room, func(t *testing.T) {
			id := "ask-" + tc.room
			got := requestAsync(t, asker, askIn(id, tc.room))
			// The request is stored before a reply can name it.
			require.Eventually(t, func() bool {
				return requestStored(t, f.e, id)
			}, 10*time.Second, 5*time.Millisecond)

			_, err := answerer.Publish(ctx, answerTo(id, tc.room))
			if tc.refuse != "" {
				requireCode(t, err, tc.refuse)
				select {
				case a := <-got:
					t.Fatalf("the requester was answered: %v %v", a.m, a.err)
				case <-time.After(50 * time.Millisecond):
				}
				return
			}
			require.NoError(t, err)
			a := <-got
			require.NoError(t, a.err)
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal(a.m.Data, &d))
			require.Equal(t, "me", d.Text)
		})
	}
}

// requestStored reports whether the audit log records the acceptance of
// id.
func requestStored(t *testing.T, e *pigeon.Engine, id string) bool {
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) && r.MessageID == id {
			return true
		}
	}
	return false
}

// A retry of a request by its id (the id the requester chose, with its
// idempotency key) claims the reply parked for it while nobody waited,
// as a retry by its key alone does (docs/delivery.md: a reply is parked
// "for a retry of the request (its idempotency key, or its id)"). Before,
// the retry that repeated the id waited for a reply that had come
// already, and timed out.
func TestRetryByIDClaimsTheParkedReply(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")

	req := demo.Payment("o-retry-by-id")
	req.ID = "req-o-retry-by-id"
	short, cancel := contextWithTimeout(50 * time.Millisecond)
	_, err := checkout.Request(short, req)
	cancel()
	requireCode(t, err, pigeon.CodeRequestTimeout)

	got, err := gateway.Receive(ctx, "payments.authorize", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, req.ID, got[0].ID)
	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)

	bounded, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	reply, err := checkout.Request(bounded, req)
	require.NoError(t, err, "the retry claims the parked reply")
	require.JSONEq(t, `{"approved":true}`, string(reply.Data))
}
