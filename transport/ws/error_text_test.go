package ws_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store/memory"
	"pigeon/store/storetest"
	"pigeon/transport/ws"
)

// An error frame tells the client what the HTTP API would: a store's
// damage by its code, not by the file and offset on the server's disk
// (those go to the server's log), and a message cut to wire.MaxMessage
// bytes, however long the name it quotes.
func TestErrorFramesTellWhatTheHTTPAPITells(t *testing.T) {
	var logs testlog.Buffer
	v := newEnv(t, &ws.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(o *pigeon.Options) {
		o.Store = storetest.Damaged{Store: memory.New(nil)}
	})
	s := v.dial(t, "alice-token", []string{"chat.messages"})
	_, err := s.Publish(context.Background(), &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat",
		Data: []byte(`{"kind":"chat","room":"lobby","text":"hi"}`)})
	require.Equal(t, pigeon.CodeStoreCorrupt, pigeon.ErrorCode(err), "%v", err)
	require.NotContains(t, err.Error(), "/var/lib/pigeon")
	require.NotContains(t, err.Error(), "0000000001.log")
	require.Contains(t, logs.String(), storetest.DamagedFile, "the operator's log names the file")

	long := strings.Repeat("x", 20_000)
	_, err = s.Subscribe(context.Background(), long, func(context.Context, *pigeon.Delivery) error { return nil })
	require.Error(t, err)
	require.Less(t, len(err.Error()), 1024, "%.200s", err.Error())
}
