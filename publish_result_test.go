package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestResultAppendMessageJSON: the answer's encoding of an accepted
// message is the encoding of the message as accepted, byte for byte what
// its subscriber is sent, and stays so when the publisher changes the
// Result's message afterwards; a Result the engine did not make encodes
// its Message.
func TestResultAppendMessageJSON(t *testing.T) {
	f := newFixture(t)
	pub := f.connect("checkout-token", "payments.authorize")
	sub := f.connect("gateway-token", "payments.authorize")
	got := make(chan []byte, 4)
	_, err := sub.Subscribe(ctx, "payments.authorize", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.AppendMessageJSON(nil)
		return nil
	})
	require.NoError(t, err)

	plain := demo.Payment("o-1")
	plain.IdempotencyKey = "k-1"
	full := demo.Payment("o-2")
	full.IdempotencyKey = "k-2"
	full.Reason, full.CorrelationID, full.Time = "retry", "c-1", "2026-11-29T12:00:00Z"
	for _, m := range []*pigeon.Message{plain, full} {
		res, err := pub.Publish(ctx, m)
		require.NoError(t, err)
		want := res.Message.AppendJSON(nil)
		require.Equal(t, "x"+string(want), string(res.AppendMessageJSON([]byte("x"))))
		var back pigeon.Message
		require.NoError(t, json.Unmarshal(want, &back))
		require.Equal(t, res.Message.Sequence, back.Sequence)

		res.Message.ID, res.Message.Data = "msg_other", json.RawMessage(`{"tampered":true}`)
		require.Equal(t, string(want), string(res.AppendMessageJSON(nil)), "the accepted bytes, not the changed message")
		require.Equal(t, string(want), string(<-got), "what the subscriber is sent")
	}

	m := demo.Payment("o-3")
	r := pigeon.Result{Status: pigeon.StatusAccepted, Message: m}
	require.Equal(t, string(m.AppendJSON(nil)), string(r.AppendMessageJSON(nil)))
}

// TestResultAppendBriefJSON: the brief encoding of an accepted message is
// its full encoding without the data member, whatever its strings hold; a
// duplicate's (the original's) is whole.
func TestResultAppendBriefJSON(t *testing.T) {
	f := newFixture(t)
	pub := f.connect("checkout-token", "payments.authorize")
	m := demo.Payment("o-1")
	m.IdempotencyKey = "k-1"
	res, err := pub.Publish(ctx, m)
	require.NoError(t, err)
	dup, err := pub.Publish(ctx, m)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)

	tricky := demo.Payment("o-2")
	tricky.IdempotencyKey = `k","data":{},"x":"`
	tricky.Reason = `,"data":` + string(tricky.Data)
	empty := demo.Payment("o-3")
	empty.Data = nil
	for _, tt := range []struct {
		name  string
		r     *pigeon.Result
		brief bool
	}{
		{"accepted", res, true},
		{"duplicate", dup, false},
		{"strings that spell a data member", &pigeon.Result{Status: pigeon.StatusAccepted, Message: tricky}, true},
		{"no data sent", &pigeon.Result{Status: pigeon.StatusAccepted, Message: empty}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			full := tt.r.AppendMessageJSON(nil)
			got := tt.r.AppendBriefJSON([]byte("x"))
			require.Equal(t, byte('x'), got[0])
			got = got[1:]
			if !tt.brief {
				require.Equal(t, string(full), string(got))
				return
			}
			var wantMap, gotMap map[string]any
			require.NoError(t, json.Unmarshal(full, &wantMap))
			require.NoError(t, json.Unmarshal(got, &gotMap))
			require.Contains(t, wantMap, "data")
			delete(wantMap, "data")
			require.Equal(t, wantMap, gotMap)
		})
	}
}
