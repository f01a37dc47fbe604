// Package walkthrough is the narrated adoption path of a governed broker:
// negotiate a contract, send one valid payment, retry it, watch an
// unauthorized service be refused, trigger the sensitive-data gates,
// receive only what was accepted, try a replay, and verify the audit chain.
// examples/payments runs it in process; `pigeon demo` runs it too.
package walkthrough

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"pigeon"
	"pigeon/demo"
)

// Run walks the path on broker, which serves the demo catalog to the demo
// tokens (demo.Catalog, demo.Tokens) and holds no payment yet, and writes
// the narration to out. It fails when a step does not turn out as the
// narration says.
func Run(ctx context.Context, broker *pigeon.Engine, out io.Writer) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	say("1. checkout-api negotiates a contract for payments.authorize")
	checkout, err := broker.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	if err != nil {
		return err
	}
	info := checkout.Contract().Info()
	say("   contract %s grants %v on %s (policy %s), expires %s",
		info.ID, info.Subjects[0].Operations, info.Subjects[0].Name, info.Subjects[0].PolicyID, info.ExpiresAt.Format(time.RFC3339))

	say("2. it sends one valid payment")
	res, err := checkout.Publish(ctx, demo.Payment("order-1001"))
	if err != nil {
		return err
	}
	say("   %s: message %s, sequence %d", res.Status, res.Message.ID, res.Message.Sequence)

	say("3. the network hiccups and it retries the same payment")
	retry, err := checkout.Publish(ctx, demo.Payment("order-1001"))
	if err != nil {
		return err
	}
	say("   %s: the original message %s comes back; the card is not charged twice", retry.Status, retry.Message.ID)

	say("4. catalog-api, which no policy lets near payments, asks for a contract")
	_, err = broker.Connect(ctx, "catalog-token", []string{"payments.authorize"})
	if err := expect(err, pigeon.CodeNoPermittedSubjects); err != nil {
		return err
	}
	say("   denied: %v", err)

	say("5. a buggy client puts the raw card number in card.pan")
	leaky := demo.Payment("order-1002")
	leaky.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"order-1002","amount":10,"currency":"GBP","paymentToken":"tok_1","card":{"pan":"4111111111111111"}}`)
	_, err = checkout.Publish(ctx, leaky)
	if err := expect(err, pigeon.CodeSensitiveFieldDenied); err != nil {
		return err
	}
	code := pigeon.ErrorCode(err)
	qid := details(err)["quarantineId"].(string)
	rec, err := broker.QuarantineRecord(ctx, qid)
	if err != nil {
		return err
	}
	say("   denied (%s) and quarantined as %s; the stored copy reads %s", code, qid, rec.Message.Data)

	say("6. another puts a raw card number where a token belongs")
	raw := demo.Payment("order-1003")
	raw.Data = json.RawMessage(`{"merchantId":"m-100","orderId":"order-1003","amount":10,"currency":"GBP","paymentToken":"4111 1111 1111 1111"}`)
	_, err = checkout.Publish(ctx, raw)
	if err := expect(err, pigeon.CodeRawPANDetected); err != nil {
		return err
	}
	say("   denied: %v", err)

	say("7. gateway-adapter receives: only the accepted payment is there")
	gateway, err := broker.Connect(ctx, "gateway-token", []string{"payments.authorize"})
	if err != nil {
		return err
	}
	got, err := gateway.Receive(ctx, "payments.authorize", 10)
	if err != nil {
		return err
	}
	for _, m := range got {
		say("   received %s (sequence %d, from %s)", m.ID, m.Sequence, m.Source)
		if err := gateway.Ack(ctx, "payments.authorize", m.ID); err != nil {
			return err
		}
	}
	if len(got) != 1 {
		return fmt.Errorf("expected exactly one payment, got %d", len(got))
	}

	say("8. someone tries to replay payments")
	_, err = checkout.Replay(ctx, pigeon.ReplayRequest{Subject: "payments.authorize", Reason: "curious"})
	if err := expect(err, pigeon.CodeReplayDenied); err != nil {
		return err
	}
	say("   denied: %v", err)

	say("9. the audit chain verifies")
	n, err := broker.VerifyAudit(ctx)
	if err != nil {
		return err
	}
	say("   %d records, hash chain intact", n)
	return nil
}

func expect(err error, code pigeon.Code) error {
	if pigeon.ErrorCode(err) != code {
		return fmt.Errorf("expected %s, got %v", code, err)
	}
	return nil
}

func details(err error) map[string]any {
	var pe *pigeon.Error
	if errors.As(err, &pe) {
		return pe.Details
	}
	return nil
}
