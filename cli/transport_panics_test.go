package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/mesgd"
	"pigeon/transport/ws"
)

// explodingStore panics when asked to append a message whose body holds
// "explode", as a store with a bug might on what a client sent.
type explodingStore struct{ store.Store }

func (s explodingStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if bytes.Contains(m.Body, []byte("explode")) {
		panic("explode")
	}
	return s.Store.Append(ctx, m)
}

// TestTransportPanicsAreScraped: the panics the WebSocket transports
// survive, which the engine's Observer does not see (an op of /v1/ws, a
// connection of /mesgd, here each a publish whose store append panics),
// are on the scrape of serve's metrics as
// pigeon_transport_panics_total{transport}, both present at 0 before.
// Before, they were in each server's Stats alone.
func TestTransportPanicsAreScraped(t *testing.T) {
	ctx := context.Background()
	o, err := newObservation()
	require.NoError(t, err)
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "alice-token", Principal: "alice"}),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
		Store:    explodingStore{st},
		Observer: o.observer(),
	})
	require.NoError(t, err)
	srv := server.New(e, &server.Options{Metrics: o.handler(), Mesgd: &mesgd.Options{Subject: "chat", PingInterval: -1}})
	o.engine, o.srv = e, srv
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(sctx))
		hs.Close()
		require.NoError(t, e.Shutdown(sctx))
	})
	panics := func(transport string) float64 {
		t.Helper()
		code, body := get(t, hs.URL+"/metrics", "")
		require.Equal(t, http.StatusOK, code)
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
		require.NoError(t, err)
		f := fams["pigeon_transport_panics_total"]
		require.NotNil(t, f, "pigeon_transport_panics_total is not scraped")
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "transport" && l.GetValue() == transport {
					return m.GetCounter().GetValue()
				}
			}
		}
		require.Failf(t, "no series", "pigeon_transport_panics_total{transport=%q}", transport)
		return 0
	}
	require.Zero(t, panics("websocket"))
	require.Zero(t, panics("mesgd"))

	base := "ws" + strings.TrimPrefix(hs.URL, "http")
	s, err := ws.Dial(ctx, base+"/v1/ws", "alice-token", []string{"chat"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	_, err = s.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat", Intent: "chat", Data: json.RawMessage(`{"text":"explode"}`)})
	require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
	require.Equal(t, 1.0, panics("websocket"))
	require.Zero(t, panics("mesgd"))

	c, _, err := websocket.Dial(ctx, base+"/mesgd/text=explode", &websocket.DialOptions{
		Subprotocols: []string{mesgd.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.CloseNow() })
	require.NoError(t, c.Write(ctx, websocket.MessageText, []byte(`{"text":"explode"}`)))
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _, err = c.Read(rctx)
	require.Equal(t, websocket.StatusInternalError, websocket.CloseStatus(err), "%v", err)
	require.Equal(t, 1.0, panics("mesgd"))
	require.Equal(t, 1.0, panics("websocket"))
}
