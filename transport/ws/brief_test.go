package ws_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/ws"
)

// indented is m with its data re-spaced: the same value in other bytes.
func indented(t *testing.T, m *pigeon.Message) *pigeon.Message {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Indent(&b, m.Data, "", "  "))
	c := *m
	c.Data = b.Bytes()
	return &c
}

// TestBriefAnswers: a publish or publish_batch frame that asks for brief
// answers gets its accepted messages back without their data. A
// duplicate's message, the original, keeps its data (which may differ from
// the data sent), and so does every answer to a frame that did not ask.
func TestBriefAnswers(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "orders-token")
	r.negotiate("notifications.send")
	original := demo.Notification("k-1")
	again := indented(t, original)
	require.NotEqual(t, string(original.Data), string(again.Data))

	type slot struct {
		status string
		data   string // "" when the answer must leave it out
	}
	for _, tt := range []struct {
		name string
		op   string
		body string
		want []slot
	}{
		{"publish", ws.OpPublish, `,"brief":true,"message":` + msgJSON(t, original),
			[]slot{{pigeon.StatusAccepted, ""}}},
		{"duplicate", ws.OpPublish, `,"brief":true,"message":` + msgJSON(t, again),
			[]slot{{pigeon.StatusDuplicate, string(original.Data)}}},
		{"not asked", ws.OpPublish, `,"brief":false,"message":` + msgJSON(t, demo.Notification("k-2")),
			[]slot{{pigeon.StatusAccepted, string(demo.Notification("k-2").Data)}}},
		{"v1 frame", ws.OpPublish, `,"message":` + msgJSON(t, demo.Notification("k-3")),
			[]slot{{pigeon.StatusAccepted, string(demo.Notification("k-3").Data)}}},
		{"batch", ws.OpPublishBatch, `,"brief":true,"messages":[` + msgJSON(t, demo.Notification("k-4")) + `,` +
			msgJSON(t, again) + `,{"type":5},` + msgJSON(t, demo.Notification("k-5")) + `]`,
			[]slot{{pigeon.StatusAccepted, ""}, {pigeon.StatusDuplicate, string(original.Data)}, {}, {pigeon.StatusAccepted, ""}}},
		{"batch not asked", ws.OpPublishBatch, `,"messages":[` + msgJSON(t, demo.Notification("k-6")) + `]`,
			[]slot{{pigeon.StatusAccepted, string(demo.Notification("k-6").Data)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []ws.BatchResult
			if tt.op == ws.OpPublish {
				f := r.ok(tt.op, tt.body, ws.OpDecision)
				got = []ws.BatchResult{{Status: f.Status, Message: f.Message}}
			} else {
				got = r.ok(tt.op, tt.body, ws.OpDecisions).Results
			}
			require.Len(t, got, len(tt.want))
			for i, w := range tt.want {
				if w.status == "" {
					require.NotNil(t, got[i].Error, "slot %d", i)
					continue
				}
				require.Equal(t, w.status, got[i].Status, "slot %d", i)
				m := decodeMsg(t, got[i].Message)
				require.NotZero(t, m.Sequence, "slot %d", i)
				require.Equal(t, demo.Orders, m.Source, "slot %d", i)
				require.Equal(t, w.data, string(m.Data), "slot %d", i)
			}
		})
	}
}

// TestBriefResultIsTheDelivery: the Go client asks for brief answers and
// puts the data it sent back into the result, which must then be the very
// message the subscriber receives, whatever the data's spacing, and a
// duplicate's result must carry the original's data, not the data sent.
func TestBriefResultIsTheDelivery(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	alice := v.dial(t, "alice-token", []string{"chat.messages"})
	bob := v.dial(t, "bob-token", []string{"chat.messages"})
	got := make(chan *pigeon.Message, 16)
	_, err := bob.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message
		return nil
	})
	require.NoError(t, err)

	chat := func(data string) *pigeon.Message {
		return &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(data)}
	}
	for _, tt := range []struct {
		name string
		m    *pigeon.Message
	}{
		{"compact", chat(`{"text":"hi","n":[1,{"x":null}]}`)},
		{"spaced", chat(" \n\t{ \"text\" : \"hi\" }\r\n ")},
		{"no data", chat("")},
		{"null", chat("null")},
		{"a string", chat(`"just text"`)},
		{"escapes and non-ASCII", chat(`{"text":"caf\u00e9 \"q\" ✓"}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sent := append(json.RawMessage(nil), tt.m.Data...)
			res, err := alice.Publish(ctx, tt.m)
			require.NoError(t, err)
			require.Equal(t, pigeon.StatusAccepted, res.Status)
			require.Equal(t, string(sent), string(tt.m.Data), "the caller's data is not touched")
			d := <-got
			require.Equal(t, d, res.Message)
			require.Equal(t, string(d.AppendJSON(nil)), string(res.Message.AppendJSON(nil)))
		})
	}

	orders := v.dial(t, "orders-token", []string{"notifications.send"})
	original := demo.Notification("k-1")
	first, err := orders.Publish(ctx, original)
	require.NoError(t, err)
	require.Equal(t, string(original.Data), string(first.Message.Data))
	dup, err := orders.Publish(ctx, indented(t, original))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, first.Message, dup.Message)
}
