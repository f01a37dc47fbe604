package pigeon_test

import (
	"context"
	"encoding/json"
	"fmt"

	"pigeon"
)

// Example shows the whole contract path in process: a catalog with one
// subject, a negotiated session, one accepted message and one refusal.
func Example() {
	ctx := context.Background()
	broker, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "orders-token", Principal: "spiffe://shop/orders"}),
		Catalog: &pigeon.Catalog{
			Schemas: map[string][]byte{"order.v1": []byte(`{"type":"object","required":["orderId"]}`)},
			Subjects: []pigeon.SubjectPolicy{{
				Name: "orders.created", Version: "v1", Intents: []string{"record_order"},
				Schema: &pigeon.SchemaRef{Name: "order.v1"},
				Data:   pigeon.DataPolicy{ForbiddenFields: []string{"card.pan"}},
				Policy: map[pigeon.Operation][]pigeon.RuleSpec{
					pigeon.OpPublish: {{Effect: "allow", Principals: []string{"spiffe://shop/orders"}}},
				},
			}},
		},
	})
	if err != nil {
		panic(err)
	}
	defer broker.Shutdown(ctx)

	sess, err := broker.Connect(ctx, "orders-token", []string{"orders.created"})
	if err != nil {
		panic(err)
	}
	res, err := sess.Publish(ctx, &pigeon.Message{Type: "order.created", Subject: "orders.created", Intent: "record_order",
		Data: json.RawMessage(`{"orderId":"o-1"}`)})
	fmt.Println(res.Status, res.Message.Sequence, err)

	_, err = sess.Publish(ctx, &pigeon.Message{Type: "order.created", Subject: "orders.created", Intent: "record_order",
		Data: json.RawMessage(`{"orderId":"o-2","card":{"pan":"4111111111111111"}}`)})
	fmt.Println(pigeon.ErrorCode(err))
	// Output:
	// accepted 1 <nil>
	// SENSITIVE_FIELD_DENIED
}
