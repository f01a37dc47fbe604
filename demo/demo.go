// Package demo is the reference broker's demo catalog and tokens: two
// subjects (payments.authorize, request/reply, PCI; notifications.send,
// work queue, PII) and the bearer tokens of the services that use them.
// Tests, examples and `pigeon serve` without --policies run on it.
package demo

import (
	"embed"
	"encoding/json"
	"io/fs"

	"pigeon"
	"pigeon/policy"
)

//go:embed policies
var files embed.FS

// Principals of the demo.
const (
	Checkout      = "spiffe://merchant-prod/ns/checkout/sa/checkout-api"
	Gateway       = "spiffe://merchant-prod/ns/payments/sa/gateway-adapter"
	Orders        = "spiffe://merchant-prod/ns/orders/sa/orders-api"
	Notifier      = "spiffe://merchant-prod/ns/notify/sa/notifier-worker"
	NotifyReplay  = "spiffe://merchant-prod/ns/ops/sa/notify-replay"
	CatalogAPI    = "spiffe://merchant-prod/ns/catalog/sa/catalog-api"
	Auditor       = "spiffe://merchant-prod/ns/ops/sa/auditor"
	Administrator = "spiffe://merchant-prod/ns/ops/sa/admin"
)

// Tokens returns the demo bearer tokens: the reference broker's six, plus
// auditor-token (role auditor) and admin-token (role admin).
func Tokens() []pigeon.StaticToken {
	return []pigeon.StaticToken{
		{Token: "checkout-token", Principal: Checkout},
		{Token: "gateway-token", Principal: Gateway},
		{Token: "orders-token", Principal: Orders},
		{Token: "notifier-token", Principal: Notifier},
		{Token: "notify-replay-token", Principal: NotifyReplay},
		{Token: "catalog-token", Principal: CatalogAPI},
		{Token: "auditor-token", Principal: Auditor, Roles: []string{"auditor"}},
		{Token: "admin-token", Principal: Administrator, Roles: []string{"admin"}},
	}
}

// Catalog returns the demo catalog as the reference broker ships it, with
// paymentToken declared as a tokenized field of payments.authorize (as the
// reference broker's in-code demo does).
func Catalog() *pigeon.Catalog {
	c, err := policy.LoadFS(FS())
	if err != nil {
		panic("demo: " + err.Error())
	}
	for i := range c.Subjects {
		if p := &c.Subjects[i]; p.Name == "payments.authorize" {
			p.Data.TokenizedFields = []string{"paymentToken"}
		}
	}
	return c
}

// FS returns the demo catalog files (subjects/ and schemas/).
func FS() fs.FS {
	sub, _ := fs.Sub(files, "policies")
	return sub
}

// Payment returns a valid payments.authorize request.
func Payment(orderID string) *pigeon.Message {
	return &pigeon.Message{
		Type:           "payment.authorization.requested",
		Subject:        "payments.authorize",
		Intent:         "authorize_payment",
		IdempotencyKey: "pay-" + orderID,
		Classification: "pci",
		Region:         "uk",
		Data: json.RawMessage(`{"merchantId":"m-100","orderId":"` + orderID +
			`","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c"}`),
	}
}

// Approval returns the gateway's reply approving the payments.authorize
// request whose message id is requestID: {"approved":true}.
func Approval(requestID string) *pigeon.Message {
	return &pigeon.Message{
		Type:           "payment.authorization.result",
		Subject:        "payments.authorize",
		Intent:         "authorize_payment",
		Classification: "pci",
		CorrelationID:  requestID,
		Data:           json.RawMessage(`{"approved":true}`),
	}
}

// Notification returns a valid notifications.send message.
func Notification(key string) *pigeon.Message {
	return &pigeon.Message{
		Type:           "notification.requested",
		Subject:        "notifications.send",
		Intent:         "send_notification",
		IdempotencyKey: key,
		Classification: "pii",
		Region:         "uk",
		Data:           json.RawMessage(`{"recipientId":"cust-42","channel":"email","templateId":"order-shipped"}`),
	}
}
