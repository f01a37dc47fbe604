package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// consoleBrowser starts headless Chromium for one test and returns a page
// and a poll helper.
func consoleBrowser(t *testing.T) (context.Context, func(what, expr string)) {
	t.Helper()
	bin := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	page, cancelPage := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelPage()
		cancelAlloc()
		if err := chromedp.Cancel(page); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("closing the browser: %v", err)
		}
	})
	poll := func(what, expr string) {
		t.Helper()
		_, err := chromedp.Run(page, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "waiting for %s", what)
	}
	return page, poll
}

// TestConsoleSignInWithoutItsScriptKeepsTheTokenOutOfURLs: when the
// page's script does not run (blocked by an extension or a proxy, served
// with a type the browser refuses), submitting the sign-in form must not
// send the token in a URL, where access logs, proxies, the history and
// Referer headers keep it.
func TestConsoleSignInWithoutItsScriptKeepsTheTokenOutOfURLs(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	srv := server.New(e, &server.Options{})
	var mu sync.Mutex
	var urls []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		urls = append(urls, r.URL.RequestURI())
		mu.Unlock()
		if r.URL.Path == "/console/app.js" {
			http.NotFound(w, r) // the script never runs
			return
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after the browser's (cleanups run last first)

	page, _ := consoleBrowser(t)
	const secret = "auditor-token"
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(ts.URL+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), secret), chromedp.Click(chromedp.CSS("#signin-btn"))))
	// Without its script the form is submitted: a second load of the page.
	pageLoads := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, u := range urls {
			if strings.HasPrefix(u, "/?") || u == "/" {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return pageLoads() >= 2 }, 20*time.Second, 20*time.Millisecond, "the form's submission")
	location, err := chromedp.Run(page, chromedp.Location())
	require.NoError(t, err)
	require.NotContains(t, location, secret)
	mu.Lock()
	defer mu.Unlock()
	for _, u := range urls {
		require.NotContains(t, u, secret, "a request URL carried the token")
	}
}

// TestConsoleShowsInvisibleCharactersOfPrincipalIDs: a principal id
// comes from an identity provider, where a user may pick a name such as
// U+200B (zero width space) followed by "admin", which a browser draws as
// "admin". The console shows such characters as escapes (the same class
// as the bidi overrides, which the broker now refuses in principal ids
// but which records from before the rule may hold), so a decision is
// never seen under another principal's name.
func TestConsoleShowsInvisibleCharactersOfPrincipalIDs(t *testing.T) {
	const spoof = "\u200badmin"
	tokens := append(demo.Tokens(), pigeon.StaticToken{Token: "spoof-token", Principal: spoof})
	feed := server.NewFeed(0)
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog: demo.Catalog(), Region: "uk", Observer: feed})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	ts := httptest.NewServer(server.New(e, &server.Options{Feed: feed}))
	t.Cleanup(ts.Close) // after the browser's (cleanups run last first)

	// The spoofer's publish is refused, and the refusal names it.
	r := doRequest(t, http.MethodPost, ts.URL+"/v1/contracts", "spoof-token", `{"subjects":["payments.authorize"]}`)
	require.GreaterOrEqual(t, r.status, 400, "%s", r.body)
	r = doRequest(t, http.MethodPost, ts.URL+"/v1/messages", "spoof-token", msgBody(t, demo.Payment("o-spoof")))
	require.GreaterOrEqual(t, r.status, 400, "%s", r.body)
	require.Eventually(t, func() bool {
		ds, _, _ := feed.Since(0, 100)
		for _, d := range ds {
			if d.Principal == spoof {
				return true
			}
		}
		return false
	}, 5*time.Second, 20*time.Millisecond, "the refusal is in the feed")

	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(ts.URL+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), "auditor-token"), chromedp.Click(chromedp.CSS("#signin-btn"))))
	poll("the decision", `document.querySelectorAll("#decisions tbody tr").length > 0`)
	cells, err := chromedp.Run(page, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#decisions tbody tr")].map(tr => tr.cells[2].textContent)`))
	require.NoError(t, err)
	require.Contains(t, cells, `\u{200B}admin`)
	for _, c := range cells {
		require.NotContains(t, c, "\u200b")
	}
}

// TestConsoleHeadersForbidFramingSniffingAndHTMLSinks: the page, its
// assets and the API page refuse framing in browsers that only know
// X-Frame-Options as well as in those that read frame-ancestors, allow no
// DOM sink to take a string as HTML or script (Trusted Types), and the
// live stream is never sniffed as another type.
func TestConsoleHeadersForbidFramingSniffingAndHTMLSinks(t *testing.T) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	ts := httptest.NewServer(server.New(e, &server.Options{Feed: server.NewFeed(0)}))
	t.Cleanup(ts.Close) // after the browser's (cleanups run last first)

	types := map[string]string{"/": "text/html; charset=utf-8", "/console/app.js": "text/javascript; charset=utf-8",
		"/console/app.css": "text/css; charset=utf-8", "/docs": "text/html; charset=utf-8"}
	for p, ct := range types {
		r := doRequest(t, http.MethodGet, ts.URL+p, "", "")
		require.Equal(t, http.StatusOK, r.status, p)
		require.Equal(t, ct, r.header.Get("Content-Type"), p)
		require.Equal(t, "DENY", r.header.Get("X-Frame-Options"), p)
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), p)
		csp := r.header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'", p)
		require.Contains(t, csp, "require-trusted-types-for 'script'", p)
		require.Contains(t, csp, "trusted-types 'none'", p)
		require.Contains(t, csp, "object-src 'none'", p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/v1/console/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer auditor-token")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
}
