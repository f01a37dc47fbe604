package pigeon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
	"pigeon/store"
	"pigeon/store/memory"
)

// TestAmbiguousJSONRefused: what the gates judge is what is stored, so a
// message whose text readers could decode differently is refused, in
// process as at the edges, and nothing reaches a receiver.
func TestAmbiguousJSONRefused(t *testing.T) {
	pan := `{"merchantId":"m-1","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"4111111111111111","paymentToken":"tok_abc"}`
	tests := []struct {
		name   string
		mutate func(m *pigeon.Message)
		code   pigeon.Code
	}{
		{"duplicate card field", func(m *pigeon.Message) { m.Data = json.RawMessage(pan) }, pigeon.CodeDuplicateKey},
		{"duplicate amount passes no schema", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m-1","orderId":"o-1","amount":"x","currency":"GBP","paymentToken":"tok_abc","amount":42.5}`)
		}, pigeon.CodeDuplicateKey},
		{"duplicate in a nested array", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok_abc","items":[{"sku":1,"sku":2}]}`)
		}, pigeon.CodeDuplicateKey},
		{"invalid utf-8 in data", func(m *pigeon.Message) {
			m.Data = json.RawMessage("{\"merchantId\":\"m-\xff\",\"orderId\":\"o-1\",\"amount\":1,\"currency\":\"GBP\",\"paymentToken\":\"tok_abc\"}")
		}, pigeon.CodeInvalidUTF8},
		{"lone surrogate in data", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m-\ud800","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok_abc"}`)
		}, pigeon.CodeInvalidUTF8},
		{"a number beyond float64", func(m *pigeon.Message) {
			m.Data = json.RawMessage(`{"merchantId":"m-1","orderId":"o-1","amount":1e400,"currency":"GBP","paymentToken":"tok_abc"}`)
		}, pigeon.CodeEnvelopeInvalid},
		{"invalid utf-8 in an envelope field", func(m *pigeon.Message) { m.Reason = "why\xc3" }, pigeon.CodeInvalidUTF8},
		{"too deep", func(m *pigeon.Message) {
			deep := `{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"tok_abc","x":`
			for range pigeon.MaxJSONDepth {
				deep += "["
			}
			for range pigeon.MaxJSONDepth {
				deep += "]"
			}
			m.Data = json.RawMessage(deep + "}")
		}, pigeon.CodeEnvelopeInvalid},
	}
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := demo.Payment("o-" + tt.name)
			tt.mutate(m)
			_, err := checkout.Publish(ctx, m)
			requireCode(t, err, tt.code)
			require.ErrorIs(t, err, pigeon.ErrDenied)
		})
	}
	got, err := gateway.Receive(ctx, "payments.authorize", 100)
	require.NoError(t, err)
	require.Empty(t, got, "a refused message reached a receiver")

	// DecodeMessage refuses the same at the edge, naming no value.
	for _, raw := range []string{
		`{"subject":"payments.authorize","data":` + pan + `}`,
		`{"subject":"a","subject":"b","data":{}}`,
		"{\"subject\":\"payments.authorize\",\"data\":{\"a\":\"\xff\"}}",
	} {
		_, err := pigeon.DecodeMessage([]byte(raw))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "4111")
		require.Contains(t, []pigeon.Code{pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8}, pigeon.ErrorCode(err))
		require.Equal(t, 400, wire.HTTPStatus(pigeon.ErrorCode(err)))
	}
}

// TestMessageIDTaken: an id names one message. A publisher may choose it,
// but not one the broker holds, its own or another principal's; a retry
// of its own message under the same idempotency key is a duplicate.
func TestMessageIDTaken(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	orders := f.connect("orders-token", "notifications.send")

	first := demo.Payment("o-1")
	first.ID = "msg-chosen"
	res, err := checkout.Publish(ctx, first)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)

	retry := demo.Payment("o-1")
	retry.ID = "msg-chosen"
	res, err = checkout.Publish(ctx, retry)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, res.Status)
	require.Equal(t, "msg-chosen", res.Message.ID)

	tests := []struct {
		name string
		s    pigeon.Session
		m    *pigeon.Message
	}{
		{"same publisher, other key", checkout, demo.Payment("o-2")},
		{"another principal, other subject", orders, demo.Notification("n-1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.m.ID = "msg-chosen"
			_, err := tt.s.Publish(ctx, tt.m)
			pe := requireCode(t, err, pigeon.CodeMessageIDTaken)
			require.Equal(t, 409, wire.HTTPStatus(pe.Code))
		})
	}
	require.Equal(t, len(tests), auditCount(t, f.e, pigeon.EventPublishDenied, pigeon.CodeMessageIDTaken), "every refusal is audited")
}

// TestMessageIDTakenConcurrently: of many publishes racing with one id,
// exactly one is accepted.
func TestMessageIDTakenConcurrently(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	var accepted, taken atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := demo.Payment("race-" + string(rune('a'+i)))
			m.ID = "msg-race"
			_, err := checkout.Publish(ctx, m)
			if err == nil {
				accepted.Add(1)
			} else if pigeon.ErrorCode(err) == pigeon.CodeMessageIDTaken {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int32(1), accepted.Load())
	require.Equal(t, int32(15), taken.Load())
}

// TestRequestIDCannotBeHijacked: a second requester using the id of a
// request that waits for its reply is refused, and the first requester
// gets its reply.
func TestRequestIDCannotBeHijacked(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	victim := demo.Payment("o-1")
	victim.ID = "req-victim"
	done := requestAsync(t, checkout, victim)
	req := receiveOne(t, gateway, "payments.authorize") // the victim's request is stored
	require.Equal(t, "req-victim", req.ID)

	// The thief asks with the same id: refused, from another principal
	// and from the same one.
	thief := f.connect("gateway-token", "payments.authorize")
	m := demo.Payment("o-9")
	m.ID = "req-victim"
	bounded, cancel2 := context.WithTimeout(ctx, 30*time.Second)
	defer cancel2()
	_, err := thief.Request(bounded, m)
	requireCode(t, err, pigeon.CodeMessageIDTaken)
	_, err = checkout.Request(bounded, m)
	requireCode(t, err, pigeon.CodeMessageIDTaken)

	_, err = gateway.Publish(ctx, demo.Approval(req.ID))
	require.NoError(t, err)
	a := <-done
	require.NoError(t, a.err)
	require.JSONEq(t, `{"approved":true}`, string(a.m.Data))
}

// TestReplyPassesEveryGate: a reply passes the application's gates, which
// see the request it answers; the publish-only gates (schema here) do not
// judge it.
func TestReplyPassesEveryGate(t *testing.T) {
	var sawRequest atomic.Bool
	noSecrets := pigeon.GateFunc("no-secrets", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		if a.Request != nil {
			sawRequest.Store(true)
		}
		if d, ok := a.Data.(map[string]any); ok && d["secret"] != nil {
			return pigeon.Deny(pigeon.CodePolicyDenied, "no secrets")
		}
		return pigeon.Allow()
	})
	f := newFixture(t, func(o *pigeon.Options) { o.Gates = []pigeon.Gate{noSecrets} })
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	res, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	reply := func(data string) error {
		_, err := gateway.Publish(ctx, &pigeon.Message{Type: "payment.authorization.result", Subject: "payments.authorize",
			Intent: "authorize_payment", Classification: "pci", CorrelationID: res.Message.ID, Data: json.RawMessage(data)})
		return err
	}
	err = reply(`{"approved":true,"secret":"s3"}`)
	pe := requireCode(t, err, pigeon.CodePolicyDenied)
	require.Equal(t, "no-secrets", pe.Decision.Gate)
	require.True(t, sawRequest.Load())
	require.NoError(t, reply(`{"approved":true}`), "a reply is not held to the request's schema")
}

// TestReceiveSettled: a consumer that never acks (the reference broker's
// HTTP pull) gets each work-queue message once; with Receive the same
// message comes back after the ack wait.
func TestReceiveSettled(t *testing.T) {
	for _, settled := range []bool{true, false} {
		t.Run(map[bool]string{true: "settled", false: "leased"}[settled], func(t *testing.T) {
			f := newFixture(t)
			checkout := f.connect("checkout-token", "payments.authorize")
			gateway := f.connect("gateway-token", "payments.authorize")
			c := gateway.(interface{ Caller() pigeon.Caller }).Caller()
			res, err := checkout.Publish(ctx, demo.Payment("o-1"))
			require.NoError(t, err)
			receive := f.e.Receive
			if settled {
				receive = f.e.ReceiveSettled
			}
			got, err := receive(ctx, c, "payments.authorize", 10)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, res.Message.ID, got[0].ID)
			f.clock.Advance(2 * time.Minute) // past the ack wait, within the contract
			again, err := receive(ctx, c, "payments.authorize", 10)
			require.NoError(t, err)
			if settled {
				require.Empty(t, again, "a settled message came back")
				require.NoError(t, gateway.Ack(ctx, "payments.authorize", res.Message.ID), "acking a settled message is a no-op")
			} else {
				require.Len(t, again, 1, "an unacked lease comes back")
			}
		})
	}
}

// receiveOne polls s until one message of subject arrives.
func receiveOne(t *testing.T, s pigeon.Session, subject string) *pigeon.Message {
	t.Helper()
	var m *pigeon.Message
	require.Eventually(t, func() bool {
		got, err := s.Receive(ctx, subject, 1)
		if err == nil && len(got) == 1 {
			m = got[0]
		}
		return m != nil
	}, 30*time.Second, time.Millisecond)
	return m
}

// TestMessageByID: a message read again by id is read under the reader's
// contract at that moment.
func TestMessageByID(t *testing.T) {
	f := newFixture(t)
	checkout := f.connect("checkout-token", "payments.authorize")
	gateway := f.connect("gateway-token", "payments.authorize")
	orders := f.connect("orders-token", "notifications.send")
	res, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	caller := callerOf

	m, err := f.e.Message(ctx, caller(gateway), res.Message.ID)
	require.NoError(t, err)
	require.JSONEq(t, string(demo.Payment("o-1").Data), string(m.Data))
	_, err = f.e.Message(ctx, caller(orders), res.Message.ID)
	requireCode(t, err, pigeon.CodeMessageNotFound) // as an id never seen: not its to know of
	_, err = f.e.Message(ctx, caller(gateway), "msg-nope")
	requireCode(t, err, pigeon.CodeMessageNotFound)
	require.NoError(t, f.e.RevokeContract(ctx, caller(gateway).Principal, gateway.Contract().ID()))
	_, err = f.e.Message(ctx, caller(gateway), res.Message.ID)
	requireCode(t, err, pigeon.CodeContractRevoked)
}

// racingNode is a store on which, at the first append of message id, a
// message of that id lands first, as another node of a cluster appending
// between this engine's check that the id is free and its own append: the
// append is refused with store.ErrExists, as the clustered store does.
type racingNode struct {
	store.Store
	id      string
	theirs  func(m store.Message) store.Message // the other node's message, from ours
	arrived atomic.Bool
}

func (s *racingNode) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if m.ID == s.id && !s.arrived.Swap(true) {
		if _, _, err := s.Store.Append(ctx, s.theirs(m)); err != nil {
			return m, false, err
		}
		return m, false, fmt.Errorf("racing node: %w", store.ErrExists)
	}
	return s.Store.Append(ctx, m)
}

// TestMessageIDTakenOnAnotherNode: an id another node takes between this
// engine's check and its append is answered as the check would have
// answered it: MESSAGE_ID_TAKEN for another's message, duplicate for the
// publisher's own (its retry through another node), audited as such.
// Before, both were STORE_UNAVAILABLE, audited publish.failed.
func TestMessageIDTakenOnAnotherNode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		theirs func(m store.Message) store.Message
		dup    bool
	}{
		{"another principal's message", func(m store.Message) store.Message {
			m.Body = bytes.ReplaceAll(m.Body, []byte(demo.Checkout), []byte(demo.Orders))
			m.IdemKey = ""
			return m
		}, false},
		{"the publisher's own, retried through another node", func(m store.Message) store.Message { return m }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &racingNode{Store: memory.New(nil), id: "msg-raced", theirs: tc.theirs}
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			checkout := f.connect("checkout-token", "payments.authorize")
			m := demo.Payment("raced")
			m.ID = "msg-raced"
			res, err := checkout.Publish(ctx, m)
			if !tc.dup {
				requireCode(t, err, pigeon.CodeMessageIDTaken)
				require.Equal(t, 1, auditCount(t, f.e, pigeon.EventPublishDenied, pigeon.CodeMessageIDTaken))
				return
			}
			require.NoError(t, err)
			require.Equal(t, pigeon.StatusDuplicate, res.Status)
			require.Equal(t, "msg-raced", res.Message.ID)
			require.Zero(t, auditCount(t, f.e, pigeon.EventPublishFailed, pigeon.CodeStoreUnavailable))
		})
	}
}
