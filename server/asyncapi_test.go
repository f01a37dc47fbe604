package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/policy"
	"pigeon/server"
)

// renderAsyncAPI is the AsyncAPI document of e's current catalog as
// /v1/asyncapi answers it: compact, with a final newline.
func renderAsyncAPI(t *testing.T, e *pigeon.Engine) string {
	t.Helper()
	doc, err := policy.AsyncAPI(e.Catalog(), policy.AsyncAPIInfo{Title: "Pigeon catalog", Version: "current"})
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, doc))
	return b.String() + "\n"
}

// TestAsyncAPIFollowsTheCatalog: /v1/asyncapi answers the document of the
// current catalog, rendered once and served again while the catalog stays
// (the same for an authenticated caller and an anonymous one), and
// rendered again once a policy changes: a new version of a subject, a new
// subject. Readers racing reloads see a whole document each time, and the
// last catalog's once the reloads end.
func TestAsyncAPIFollowsTheCatalog(t *testing.T) {
	f := newFixture(t)
	get := func(token string) string {
		t.Helper()
		r := f.do(t, http.MethodGet, "/v1/asyncapi", token, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		return string(r.body)
	}
	first := get("")
	require.Equal(t, renderAsyncAPI(t, f.e), first)
	require.Equal(t, first, get(""), "served again")
	require.Equal(t, first, get("checkout-token"), "the same for every caller")
	require.NotContains(t, first, "policy version v2")

	p, err := f.e.Subject("orders.events")
	require.NoError(t, err)
	p.Version = "v2"
	require.NoError(t, f.e.ReplaceSubject(context.Background(), p))
	second := get("")
	require.NotEqual(t, first, second, "a policy changed")
	require.Contains(t, second, "Pigeon subject orders.events, policy version v2.")
	require.Equal(t, renderAsyncAPI(t, f.e), second)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Not get: require must not stop the test from here.
				resp, err := http.Get(f.hs.URL + "/v1/asyncapi")
				if err != nil {
					t.Error(err)
					return
				}
				var doc map[string]any
				err = json.NewDecoder(resp.Body).Decode(&doc)
				_ = resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || doc["asyncapi"] != "3.0.0" {
					t.Errorf("status %d, %v: %v", resp.StatusCode, err, doc["asyncapi"])
					return
				}
			}
		})
	}
	for i := range 20 {
		q := pigeon.SubjectPolicy{Name: "asyncapi.test", Version: "v" + string(rune('a'+i)), Mode: pigeon.ModePubSub, Intents: []string{"record"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow", Principals: []string{demo.Checkout}}}}}
		require.NoError(t, f.e.ReplaceSubject(context.Background(), q))
	}
	close(stop)
	wg.Wait()
	last := get("")
	require.Contains(t, last, "Pigeon subject asyncapi.test, policy version vt.")
	require.Equal(t, renderAsyncAPI(t, f.e), last)
}

// BenchmarkAsyncapi is GET /v1/asyncapi on the test catalog (the demo's
// subjects and a schema), through the server's handler without a network.
//
//	go test -run XXX -bench Asyncapi -benchmem ./server/
func BenchmarkAsyncapi(b *testing.B) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Catalog: testCatalog()})
	require.NoError(b, err)
	b.Cleanup(func() { _ = e.Shutdown(ctx) })
	s := server.New(e, nil)
	req := httptest.NewRequest(http.MethodGet, "/v1/asyncapi", nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.status = 0
		s.ServeHTTP(w, req)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}
