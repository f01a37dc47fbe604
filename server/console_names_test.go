package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// scriptedEvents is a console server whose live stream
// (/v1/console/events) is the test's: each connection to it is handed to
// stream, with its number from 1; everything else is the real server's.
func scriptedEvents(t *testing.T, stream func(n int, w http.ResponseWriter, r *http.Request)) string {
	t.Helper()
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	srv := server.New(e, &server.Options{Feed: server.NewFeed(0)})
	var mu sync.Mutex
	n := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/console/events" {
			srv.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		stream(k, w, r)
	}))
	t.Cleanup(ts.Close) // after the browser's (cleanups run last first)
	return ts.URL
}

// sendEvent writes one server-sent event and flushes it.
func sendEvent(w http.ResponseWriter, event, data string) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
	w.(http.Flusher).Flush()
}

const consoleHello = `{"principal":"auditor","roles":["auditor"],"feed":true}`

// TestConsoleRatesOfSubjectsNamedAsObjectMembers: the rates table keeps
// the last counts by subject name. Kept in a plain object, a subject named
// "constructor", "toString", "hasOwnProperty" or "__proto__" finds
// Object.prototype's member there the first time it is seen, and its rate
// reads NaN; its counts are the server's alone.
func TestConsoleRatesOfSubjectsNamedAsObjectMembers(t *testing.T) {
	events := make(chan [2]string)
	url := scriptedEvents(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sendEvent(w, "hello", consoleHello)
		for {
			select {
			case ev := <-events:
				sendEvent(w, ev[0], ev[1])
			case <-r.Context().Done():
				return
			}
		}
	})
	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(url+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), "auditor-token"), chromedp.Click(chromedp.CSS("#signin-btn"))))
	poll("signed in", `!document.getElementById("app").hidden`)

	counts := func(n int) string { return fmt.Sprintf(`{"accepted":%d,"denied":1,"quarantined":1}`, n) }
	names := []string{"constructor", "toString", "hasOwnProperty", "__proto__", "valueOf"}
	rates := func(second int, accepted map[string]int) {
		parts := []string{}
		for name, n := range accepted {
			parts = append(parts, fmt.Sprintf("%q:%s", name, counts(n)))
		}
		events <- [2]string{"rates", fmt.Sprintf(`{"time":"2026-01-01T00:00:%02dZ","subjects":{%s}}`, second, strings.Join(parts, ","))}
	}
	table := func(what string, rows int) [][]string {
		t.Helper()
		poll(what, fmt.Sprintf(`document.querySelectorAll("#rates tbody tr").length === %d`, rows))
		got, err := chromedp.Run(page, chromedp.Evaluate[[][]string](
			`[...document.querySelectorAll("#rates tbody tr")].map(tr => [...tr.cells].map(td => td.textContent))`))
		require.NoError(t, err)
		return got
	}

	rates(0, map[string]int{"payments.authorize": 1})
	table("the first rates", 1)
	// The names first seen now have no rate yet; the one seen before has.
	second := map[string]int{"payments.authorize": 3}
	for _, name := range names {
		second[name] = 5
	}
	rates(2, second)
	got := table("the second rates", 1+len(names))
	for _, r := range got {
		if r[0] == "payments.authorize" {
			require.Equal(t, []string{"payments.authorize", "3", "1", "1", "1.0"}, r)
			continue
		}
		require.Contains(t, names, r[0])
		require.Equal(t, []string{r[0], "5", "1", "1", ""}, r, "a subject first seen has no rate")
	}
	// Seen twice, each has its own rate.
	third := map[string]int{"payments.authorize": 3}
	for i, name := range names {
		third[name] = 5 + 2*(i+1)
	}
	rates(4, third)
	poll("the third rates", `[...document.querySelectorAll("#rates tbody tr")].every(tr => tr.cells[4].textContent !== "")`)
	got = table("the third rates", 1+len(names))
	want := map[string]string{"payments.authorize": "0.0"}
	for i, name := range names {
		want[name] = fmt.Sprintf("%d.0", i+1)
	}
	for _, r := range got {
		require.Equal(t, want[r[0]], r[4], "the rate of %q", r[0])
	}
}

// TestConsoleReconnectPausesAreJittered: after the live stream ends, the
// console reconnects after a pause that grows with each failure (to 5 s),
// drawn at random between half of it and all of it, so that consoles cut
// off together (a server restart) do not all come back in the same
// instant. Math.random and setTimeout are the test's: the pauses asked for
// follow the random draws.
func TestConsoleReconnectPausesAreJittered(t *testing.T) {
	url := scriptedEvents(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1: // ends at once
			w.Header().Set("Content-Type", "text/event-stream")
			sendEvent(w, "hello", consoleHello)
		case 2, 3: // refused: the pause grows
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"UNAVAILABLE","message":"restarting"}}`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			sendEvent(w, "hello", consoleHello)
			<-r.Context().Done()
		}
	})
	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(url+"/")))
	_, err := chromedp.Run(page, chromedp.Evaluate[bool](`(() => {
			const draws = [0, 0.5, 0.999];
			let i = 0;
			Math.random = () => draws[Math.min(i++, draws.length - 1)];
			window.pauses = [];
			const setTimeout0 = window.setTimeout;
			window.setTimeout = (f, ms, ...rest) => {
				// The console's pauses (not the quarantine's 300 ms, nor the
				// test's polling), cut short.
				if (ms < 400 || !new Error().stack.includes("/console/app.js")) return setTimeout0(f, ms, ...rest);
				window.pauses.push(ms);
				return setTimeout0(f, 50, ...rest);
			};
			return true;
		})()`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(page, chromedp.SendKeys(chromedp.CSS("#token"), "auditor-token"), chromedp.Click(chromedp.CSS("#signin-btn"))))
	poll("three reconnects", `window.pauses.length >= 3`)
	pauses, err := chromedp.Run(page, chromedp.Evaluate[[]float64](`window.pauses`))
	require.NoError(t, err)
	// Pauses of 1 s, 2 s and 3 s, drawn at 0, 0.5 and 0.999 of their upper half.
	require.Equal(t, []float64{500, 1500, 2998.5}, pauses[:3])
	poll("live again", `document.getElementById("conn").textContent === "live"`)
}
