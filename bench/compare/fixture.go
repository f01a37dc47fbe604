package main

import (
	"encoding/json"
	"strconv"
	"sync/atomic"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
)

// The subjects every scenario uses. eventsSubject is a pubsub subject that
// carries the demo payment subject's whole governance (schema, intents,
// region policy, idempotency, classification, forbidden fields, tokenized
// fields, quarantine, publish/receive/ack rules); replySubject is the demo
// payment subject itself, request/reply.
const (
	eventsSubject = "payments.events"
	replySubject  = "payments.authorize"

	publisherToken = "checkout-token" // allowed to publish on both subjects
	receiverToken  = "gateway-token"  // allowed to receive, ack and reply
)

// paymentJSON is the payload of every measured message, for every system:
// a payment authorization that passes payment.authorization.v1, holds no
// raw card number and no forbidden field. It is exactly 259 bytes.
const paymentJSON = `{"merchantId":"m-100","orderId":"o-7f3a9c21","amount":42.5,"currency":"GBP",` +
	`"paymentToken":"tok_9f8e7d6c5b4a3921","customerId":"cust-42","channel":"web",` +
	`"description":"Order o-7f3a9c21: 2 items, standard delivery",` +
	`"metadata":{"cartId":"cart-5521","ab":"b12"}}`

// payload is paymentJSON as bytes, shared read-only by every scenario.
var payload = []byte(paymentJSON)

// catalog returns the demo catalog plus eventsSubject, a copy of
// payments.authorize in pubsub mode.
func catalog() *pigeon.Catalog {
	c := demo.Catalog()
	for _, s := range c.Subjects {
		if s.Name != replySubject {
			continue
		}
		ev := s
		ev.Name, ev.Mode = eventsSubject, pigeon.ModePubSub
		ev.Intents = append([]string(nil), s.Intents...)
		c.Subjects = append(c.Subjects, ev)
		break
	}
	return c
}

// engineOptions are Pigeon's defaults plus what any deployment must name:
// who may connect, the catalog, the region and the store.
func engineOptions(st store.Store) *pigeon.Options {
	return &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       catalog(),
		Region:        "uk",
		Store:         st,
	}
}

// messages hands out payment messages with unique idempotency keys; it is
// safe for concurrent use.
type messages struct {
	subject string
	n       atomic.Int64
}

// next returns a new message, never handed out before.
func (g *messages) next() *pigeon.Message {
	return &pigeon.Message{
		Type:           "payment.authorization.requested",
		Subject:        g.subject,
		Intent:         "authorize_payment",
		IdempotencyKey: "k-" + strconv.FormatInt(g.n.Add(1), 10),
		Classification: "pci",
		Region:         "uk",
		Data:           json.RawMessage(payload),
	}
}

// reply answers a request on replySubject, as the gateway would.
func reply(req *pigeon.Message) *pigeon.Message {
	return &pigeon.Message{
		Type:           "payment.authorization.result",
		Subject:        replySubject,
		Intent:         "authorize_payment",
		Classification: "pci",
		CorrelationID:  req.ID,
		Data:           json.RawMessage(replyJSON),
	}
}

// replyJSON is the answer of every request/reply scenario, NATS included.
const replyJSON = `{"approved":true}`
