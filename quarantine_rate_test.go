package pigeon_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestQuarantineIsRateLimitedPerPrincipal: a principal's refused messages
// are kept in the quarantine within Options.QuarantineRate; beyond it they
// are still refused with their code and audited, as denials whose copy is
// not kept, and observers count them. Another principal keeps its own
// rate, and the rate refills with time.
func TestQuarantineIsRateLimitedPerPrincipal(t *testing.T) {
	obs := newRecorder()
	f := newFixture(t, func(o *pigeon.Options) {
		o.QuarantineRate = pigeon.RateLimitPolicy{PerSecond: 1, Burst: 3}
		o.Observer = obs
	})
	checkout := f.connect("checkout-token", "payments.authorize")
	orders := f.connect("orders-token", "notifications.send")
	withPAN := func(i int) *pigeon.Message {
		m := demo.Payment("o-" + itoa(i))
		m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"tok_1","card":{"pan":"4111111111111111"}}`)
		return m
	}
	withSSN := func(i int) *pigeon.Message {
		m := demo.Notification("n-" + itoa(i))
		m.Data = json.RawMessage(`{"recipientId":"c","channel":"sms","templateId":"t","recipient":{"ssn":"078-05-1120"}}`)
		return m
	}
	// kept publishes m and tells whether its refusal kept a copy.
	kept := func(s pigeon.Session, m *pigeon.Message) bool {
		t.Helper()
		_, err := s.Publish(ctx, m)
		pe := requireCode(t, err, pigeon.CodeSensitiveFieldDenied)
		id, ok := pe.Details["quarantineId"].(string)
		require.Equal(t, ok, pe.Decision.Outcome == pigeon.OutcomeQuarantine)
		require.Equal(t, ok, errors.Is(err, pigeon.ErrQuarantined))
		if ok {
			_, err := f.e.QuarantineRecord(ctx, id)
			require.NoError(t, err)
		}
		return ok
	}

	var got []bool
	for i := range 6 {
		got = append(got, kept(checkout, withPAN(i)))
	}
	require.Equal(t, []bool{true, true, true, false, false, false}, got, "the burst is kept, the rest refused without a copy")
	require.True(t, kept(orders, withSSN(0)), "another principal has its own rate")
	f.clock.Advance(time.Second)
	require.True(t, kept(checkout, withPAN(6)), "the rate refills")
	require.False(t, kept(checkout, withPAN(7)))

	list, err := f.e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, list, 5)
	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	outcomes := map[string]int{}
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishDenied) && r.Code == string(pigeon.CodeSensitiveFieldDenied) {
			outcomes[r.Outcome]++
		}
	}
	require.Equal(t, map[string]int{"quarantine": 5, "deny": 4}, outcomes, "every refusal is audited")
	require.True(t, obs.snapshot(func(r *recorder) bool {
		return len(r.notes[pigeon.NoteQuarantineSkipped]) == 4 && r.notes[pigeon.NoteQuarantineSkipped][0] == "payments.authorize"
	}))
}

// TestQuarantineRateDefaultsAndOff: the default keeps a burst of 100 a
// principal; a negative rate keeps every copy.
func TestQuarantineRateDefaultsAndOff(t *testing.T) {
	require.Equal(t, pigeon.RateLimitPolicy{PerSecond: 5, Burst: 100}, pigeon.DefaultQuarantineRate)
	for _, tc := range []struct {
		name string
		rate pigeon.RateLimitPolicy
		kept int
	}{
		{"default", pigeon.RateLimitPolicy{}, 100},
		{"off", pigeon.RateLimitPolicy{PerSecond: -1}, 120},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(o *pigeon.Options) { o.QuarantineRate = tc.rate })
			s := f.connect("checkout-token", "payments.authorize")
			n := 0
			for i := range 120 {
				m := demo.Payment("o-" + itoa(i))
				m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"4111111111111111"}`)
				_, err := s.Publish(ctx, m)
				if errors.Is(err, pigeon.ErrQuarantined) {
					n++
				}
			}
			require.Equal(t, tc.kept, n)
		})
	}
}
