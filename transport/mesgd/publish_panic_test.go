package mesgd_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/mesgd"
)

// appendPanicStore panics when asked to append a message whose body
// holds "explode", as a store (or anything a publish calls beyond the
// gates) with a bug might on what a client sent.
type appendPanicStore struct{ store.Store }

func (s appendPanicStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if bytes.Contains(m.Body, []byte("explode")) {
		panic("explode 4111111111111111")
	}
	return s.Store.Append(ctx, m)
}

// TestPublishPanicClosesOnlyItsConnection: a frame whose publish
// panics beyond the gates closes its mesgd connection with 1011, the
// panic logged with a card number in it redacted; the broker and other
// connections go on. Before, the panic reached net/http, which logged it
// whole, card number and all, and the client's connection was cut with
// no close frame (EOF).
func TestPublishPanicClosesOnlyItsConnection(t *testing.T) {
	ctx := context.Background()
	logs := &testlog.Buffer{}
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob"}}}
	st := memory.New(nil)
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
			pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
		Store: appendPanicStore{st},
	})
	require.NoError(t, err)
	s := server.New(e, &server.Options{Mesgd: &mesgd.Options{Subject: "chat", Logger: logs.Logger()}})
	hs := httptest.NewServer(s)
	stopAtEnd(t, s, hs, e)
	t.Cleanup(func() { _ = st.Close(context.Background()) })

	bob := dialMesgd(t, hs.URL, "/mesgd/kind=chat", "bob-token", true)
	alice := dialMesgd(t, hs.URL, "/mesgd/kind=chat", "alice-token", true)
	send(t, alice, `{"kind":"chat","text":"explode"}`)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err = alice.Read(rctx)
	require.Equal(t, websocket.StatusInternalError, websocket.CloseStatus(err), "%v", err)
	require.Contains(t, logs.String(), "a mesgd connection panicked")
	require.NotContains(t, logs.String(), "4111111111111111")

	send(t, bob, `{"kind":"chat","text":"the broker goes on"}`)
	require.Equal(t, "the broker goes on", readFrame(t, bob)["text"])
	again := dialMesgd(t, hs.URL, "/mesgd/kind=chat", "alice-token", true)
	send(t, again, `{"kind":"chat","text":"and takes new connections"}`)
	require.True(t, strings.HasPrefix(readFrame(t, again)["text"].(string), "and takes"))
}
