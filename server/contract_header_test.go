package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestContractHeaderAndBodyMustAgree: a request that names its contract
// in the x-pigeon-contract header and another in the body's contractId is
// BAD_REQUEST on every route that takes both, and nothing happens: each
// pair is two live contracts of the caller on the subject, so taking
// either would have worked. Naming the same one twice works.
func TestContractHeaderAndBodyMustAgree(t *testing.T) {
	f := newFixture(t)
	checkout := [2]string{f.contract(t, "checkout-token", "payments.authorize"), f.contract(t, "checkout-token", "payments.authorize")}
	gateway := [2]string{f.contract(t, "gateway-token", "payments.authorize"), f.contract(t, "gateway-token", "payments.authorize")}
	notifier := [2]string{f.contract(t, "notifier-token", "notifications.send"), f.contract(t, "notifier-token", "notifications.send")}
	replayer := [2]string{f.contract(t, "notify-replay-token", "notifications.send"), f.contract(t, "notify-replay-token", "notifications.send")}
	orders := f.contract(t, "orders-token", "notifications.send")

	// One notification waits on notifications.send: a receive, an ack or a
	// replay that went through would show.
	r := f.do(t, http.MethodPost, "/v1/messages", "orders-token", msgBody(t, demo.Notification("n-1")), "x-pigeon-contract", orders)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	id := r.json(t)["message"].(map[string]any)["id"].(string)

	withBody := func(m *pigeon.Message, contract string) string {
		m.ContractID = contract
		return msgBody(t, m)
	}
	settle := func(contract string) string {
		b, err := json.Marshal(map[string]any{"messageId": id, "contractId": contract})
		require.NoError(t, err)
		return string(b)
	}
	tests := []struct {
		name, path, token string
		body              func(contract string) string
		pair              [2]string
	}{
		{"publish", "/v1/messages", "checkout-token", func(c string) string { return withBody(demo.Payment("o-1"), c) }, checkout},
		{"request", "/v1/requests", "checkout-token", func(c string) string { return `{"message":` + withBody(demo.Payment("o-2"), c) + `}` }, checkout},
		{"receive", "/v1/subjects/notifications.send/receive", "notifier-token", func(c string) string { return `{"max":1,"contractId":"` + c + `"}` }, notifier},
		{"ack", "/v1/subjects/notifications.send/ack", "notifier-token", settle, notifier},
		{"nack", "/v1/subjects/notifications.send/nack", "notifier-token", settle, notifier},
		{"replay", "/v1/subjects/notifications.send/replay", "notify-replay-token", func(c string) string { return `{"reason":"audit","contractId":"` + c + `"}` }, replayer},
		{"release", "/v1/quarantine/q_none/release", "auditor-token", func(c string) string { return `{"contractId":"` + c + `"}` }, checkout},
		{"receive on a work queue of payments", "/v1/subjects/payments.authorize/receive", "gateway-token", func(c string) string { return `{"max":1,"contractId":"` + c + `"}` }, gateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.do(t, http.MethodPost, tc.path, tc.token, tc.body(tc.pair[1]), "x-pigeon-contract", tc.pair[0])
			require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeBadRequest, r.code(t))
			require.Contains(t, r.message(t), "different contracts")
		})
	}

	s, err := f.e.Stats(context.Background())
	require.NoError(t, err)
	for _, sub := range s.Subjects {
		switch sub.Subject {
		case "payments.authorize":
			require.Zero(t, sub.Messages, "no refused publish or request was stored")
		case "notifications.send":
			require.Equal(t, 1, int(sub.Messages))
		}
	}
	require.Empty(t, s.Groups, "no refused receive, ack or nack moved a consumer")

	// The same contract in both is that contract.
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", withBody(demo.Payment("o-3"), checkout[0]), "x-pigeon-contract", checkout[0])
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r = f.do(t, http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":1,"contractId":"`+notifier[1]+`"}`, "x-pigeon-contract", notifier[1])
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Len(t, r.json(t)["messages"], 1)
}
