package pigeon_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/transporttest"
)

// CEL conditions read data's numbers as doubles, while the store keeps,
// and exact readers get, the publisher's text. A number a double does
// not hold faithfully made a condition judge another number than the one
// delivered: 1000.0000000000000001 passed a deny rule on qty > 1000,
// -1e-400 a data-quality rule on price >= 0, and 42.0000000000000001
// reached a subscription filtering tenant 42. Such a number now fails
// every condition that reads it, and each fails closed.
func TestConditionsJudgeNumbersAsStored(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) {
		o.Catalog = transporttest.Options().Catalog
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "stock.moves", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"move"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {
					{Effect: "deny", Principals: []string{transporttest.Alice}, When: `has(message.data.qty) && message.data.qty > 1000.0`},
					{Effect: "allow", Principals: []string{transporttest.Alice}},
				},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{transporttest.Bob}}},
			},
			Rules: []pigeon.QualityRule{{Name: "price-not-negative", Expr: `!has(message.data.price) || message.data.price >= 0.0`}},
		})
		o.Authenticator = transporttest.Options().Authenticator
	})
	alice := f.connect("alice-token", "stock.moves")
	bob := f.connect("bob-token", "stock.moves")

	var (
		mu      sync.Mutex
		tenants []string
	)
	_, err := bob.Subscribe(ctx, "stock.moves", func(_ context.Context, d *pigeon.Delivery) error {
		var v struct{ Tenant json.Number }
		require.NoError(t, json.Unmarshal(d.Message.Data, &v))
		mu.Lock()
		tenants = append(tenants, string(v.Tenant))
		mu.Unlock()
		return nil
	}, pigeon.WithFilter(`message.data.tenant == 42.0`))
	require.NoError(t, err)

	publish := func(data string) error {
		_, err := alice.Publish(ctx, &pigeon.Message{Type: "stock.move", Subject: "stock.moves", Intent: "move", Data: json.RawMessage(data)})
		return err
	}
	for _, tc := range []struct {
		data string
		code pigeon.Code // "" when accepted
	}{
		{`{"qty":1000}`, ""},
		{`{"qty":1001}`, pigeon.CodePolicyDenied},
		{`{"qty":1000.0000000000000001}`, pigeon.CodePolicyDenied},
		{`{"price":0}`, ""},
		{`{"price":-1e-400}`, pigeon.CodeDataQuality},
		{`{"tenant":42.0000000000000001}`, ""},
		{`{"tenant":42}`, ""},
	} {
		err := publish(tc.data)
		if tc.code == "" {
			require.NoError(t, err, tc.data)
		} else {
			requireCode(t, err, tc.code)
		}
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(tenants) > 0
	}, 5*time.Second, 5*time.Millisecond)
	// A later message passes the filter after the one refused by it: had
	// the refused one been delivered, it would have come first.
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"42"}, tenants)
}

// The fan-out's cache keeps what the publish path's decoder found of the
// data's numbers, so that a subscription filter decodes data again
// (cond.ExactData) only for data holding a number a double cannot keep,
// not for every message it judges.
func TestFanOutKeepsTheDecodersNumberVerdict(t *testing.T) {
	f := newFixture(t, func(o *pigeon.Options) {
		o.Catalog = transporttest.Options().Catalog
		o.Authenticator = transporttest.Options().Authenticator
	})
	alice := f.connect("alice-token", "chat.messages")
	_, err := alice.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil },
		pigeon.WithFilter(`message.data.kind == "chat"`))
	require.NoError(t, err)
	for _, tc := range []struct {
		data  string
		exact bool
	}{
		{`{"kind":"chat","n":42}`, true},
		{``, true},
		{`{"kind":"chat","n":42.0000000000000001}`, false},
	} {
		res, err := alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(tc.data)})
		require.NoError(t, err, tc.data)
		exact, cached := f.e.RecentExact("chat.messages", res.Message.Sequence)
		require.True(t, cached, tc.data)
		require.Equal(t, tc.exact, exact, tc.data)
	}
}
