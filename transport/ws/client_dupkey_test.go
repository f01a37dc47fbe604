package ws_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// A frame holding an object with two members of one name (the frame's own,
// an envelope's, a delivery's, a contract's, an error's) is refused whole,
// as pigeon.CheckJSON refuses it (DUPLICATE_KEY), instead of one of the
// two being taken: encoding/json keeps the last, another reader the first.
// A delivery in it reaches no handler (the ack wait gives it back), and
// the refusal is logged as every frame the client cannot decode.
func TestClientRefusesDeliveriesWithDuplicateKeys(t *testing.T) {
	msg := func(id, rest string) string {
		return `{"specversion":"1.0","id":"msg_` + id + `","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z"` + rest + `}`
	}
	hostile := []string{
		`{"op":"deliver","sub":"s1","attempt":1,"message":` + msg("7", `,"sequence":7,"sequence":70,"data":{}`) + `}`,
		`{"op":"deliver","sub":"s1","attempt":1,"attempt":2,"message":` + msg("6", `,"sequence":6,"data":{}`) + `}`,
		`{"op":"deliver","sub":"s1","sub":"s1","attempt":1,"message":` + msg("5", `,"sequence":5,"data":{}`) + `}`,
		`{"op":"deliver","sub":"s1","attempt":1,"message":` + msg("4", `,"sequence":4,"signature":{"kid":"k","kid":"j","alg":"ed25519","sig":"x"},"data":{}`) + `}`,
		`{"op":"deliver_batch","sub":"s1","deliveries":[{"attempt":1,"attempt":3,"message":` + msg("3", `,"sequence":3,"data":{}`) + `}]}`,
		`{"op":"deliver_batch","sub":"s1","deliveries":[{"attempt":1,"message":` + msg("2", `,"sequence":2,"id":"msg_22","data":{}`) + `}]}`,
	}
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpSubscribe:
			return append(append([]string{subscribedFrame(f, "s1")}, hostile...), deliverSeq("s1", "9", 9))
		case ws.OpReceive:
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
		}
		return []string{okFrame(f)}
	})
	logs := &logCount{}
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"}, ws.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	defer s.Close(ctx)
	var (
		mu   sync.Mutex
		seen []string
	)
	_, err = s.Subscribe(ctx, "chat.messages", func(_ context.Context, d *pigeon.Delivery) error {
		mu.Lock()
		seen = append(seen, d.Message.ID)
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	// The answer to a later frame comes after every delivery.
	_, err = s.Receive(ctx, "chat.messages", 1)
	require.NoError(t, err)
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0
	}, "the well-formed delivery handled")
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{"msg_9"}, seen, "no delivery of a frame with a duplicate key reached the handler")
	mu.Unlock()
	require.Equal(t, len(hostile), logs.count("undecodable frame from server"), "each refused frame is logged")
	require.NoError(t, s.Err(), "a bad frame does not end the connection")
}

// A call answered by a frame holding a duplicate key fails at once with
// DUPLICATE_KEY (the code the client's decoder gives a frame it refuses),
// rather than taking one of the two values or waiting for its deadline:
// the frame's "re" is still read when it is there once.
func TestClientFailsCallsAnsweredWithDuplicateKeys(t *testing.T) {
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpReceive:
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[],"messages":[{}]}`}
		case ws.OpAck:
			return []string{`{"op":"error","re":"` + f.ID + `","error":{"code":"FORBIDDEN","code":"NOT_FOUND","message":"m"}}`}
		case ws.OpRenew:
			return []string{`{"op":"contract","re":"` + f.ID + `","contract":{"id":"ctr_2","id":"ctr_3","principal":"p","subjects":[]}}`}
		case ws.OpPublish:
			return []string{`{"op":"decision","re":"` + f.ID + `","status":"accepted","message":{"id":"msg_1","sequence":1,"sequence":2,"data":{}}}`}
		}
		return []string{okFrame(f)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	defer s.Close(context.Background())
	calls := map[string]func() error{
		"receive": func() error { _, err := s.Receive(ctx, "chat.messages", 1); return err },
		"ack (an error answer)": func() error {
			return s.Ack(ctx, "chat.messages", "msg_1")
		},
		"renew": func() error { _, err := s.Renew(ctx); return err },
		"publish": func() error {
			_, err := s.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Data: []byte(`{}`)})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		require.Equal(t, pigeon.CodeDuplicateKey, pigeon.ErrorCode(err), "%s: %v", name, err)
		require.True(t, strings.Contains(err.Error(), "duplicate member name"), "%s: %v", name, err)
	}
	require.NoError(t, ctx.Err(), "no call waited for its deadline")
	require.NoError(t, s.Err())
}
