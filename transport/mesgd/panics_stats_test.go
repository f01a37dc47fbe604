package mesgd_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store/memory"
	"pigeon/transport/mesgd"
)

// TestSurvivedPanicsAreInStats: a panic a connection's handler survives
// (here the store's, under the publish of a frame) is counted in
// Stats.Panics, as well as logged, so that an operator can alert on it:
// the engine's Observer does not see it. Before, it was logged alone.
func TestSurvivedPanicsAreInStats(t *testing.T) {
	ctx := context.Background()
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice"}}}
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "alice-token", Principal: "alice"}),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
		Store: appendPanicStore{st},
	})
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "chat", PingInterval: -1})
	hs := httptest.NewServer(srv)
	stopAtEnd(t, srv, hs, e)

	c := dialMesgd(t, hs.URL, "/mesgd/kind=chat", "alice-token", true)
	send(t, c, `{"kind":"chat","text":"fine"}`)
	require.Equal(t, "fine", readFrame(t, c)["text"])
	require.Zero(t, srv.Stats().Panics)

	send(t, c, `{"kind":"chat","text":"explode"}`)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err = c.Read(rctx)
	require.Equal(t, websocket.StatusInternalError, websocket.CloseStatus(err), "%v", err)
	require.EqualValues(t, 1, srv.Stats().Panics)
}
