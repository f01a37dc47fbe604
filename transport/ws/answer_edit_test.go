package ws_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestAnswerNamesTheDeliveryAsDelivered: a handler that edits its
// delivery's message (its ID and Sequence) before it returns still has its
// ack, or its nack, name the message it was handed. The client read them
// from the message after the handler returned, so the answer settled
// another message published under the edited id (the TypeScript and Python
// clients had the same hole).
func TestAnswerNamesTheDeliveryAsDelivered(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "ack", true: "nack"}[fail], func(t *testing.T) {
			answers := make(chan *ws.Frame, 4)
			url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
				f := readFrame(ctx, c)
				write := func(b []byte) bool { return c.Write(ctx, websocket.MessageText, b) == nil }
				exp := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
				if f == nil || f.Op != ws.OpNegotiate || !write([]byte(`{"op":"contract","re":"`+f.ID+`","contract":{"id":"ctr_1","principal":"p","subjects":[],"expiresAt":"`+exp+`"}}`)) {
					return
				}
				if f = readFrame(ctx, c); f == nil || f.Op != ws.OpSubscribe || !write([]byte(`{"op":"subscribed","re":"`+f.ID+`","sub":"sub_1"}`)) {
					return
				}
				m, err := json.Marshal(&pigeon.Message{ID: "msg_1", Type: "job", Subject: "jobs.run", Intent: "run", Data: []byte(`{}`), Sequence: 3})
				if err != nil || !write([]byte(`{"op":"deliver","sub":"sub_1","attempt":1,"message":`+string(m)+`}`)) {
					return
				}
				for {
					f := readFrame(ctx, c)
					if f == nil {
						return
					}
					if f.Op == ws.OpAck || f.Op == ws.OpNack {
						answers <- f
					}
					if !write([]byte(`{"op":"ok","re":"` + f.ID + `"}`)) {
						return
					}
				}
			})
			s := dialChat(t, url)
			_, err := s.Subscribe(context.Background(), "jobs.run", func(_ context.Context, d *pigeon.Delivery) error {
				d.Message.ID, d.Message.Sequence = "msg_other", 99
				if fail {
					return errors.New("failed")
				}
				return nil
			}, pigeon.WithGroup("g"))
			require.NoError(t, err)
			select {
			case f := <-answers:
				want := ws.OpAck
				if fail {
					want = ws.OpNack
				}
				require.Equal(t, want, f.Op)
				require.Equal(t, "msg_1", f.MessageID)
				require.EqualValues(t, 3, f.Sequence)
			case <-time.After(10 * time.Second):
				t.Fatal("no answer")
			}
		})
	}
}
