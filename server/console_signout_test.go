package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// signOutConsole is a server for the sign-out tests: the demo's tokens and
// checkout-auditor-token (an auditor who may publish on
// payments.authorize), a feed, and a review gate that quarantines
// payments while hold is set. wrap, when set, stands in front of the
// server.
type signOutConsole struct {
	url  string
	hold atomic.Bool
}

func newSignOutConsole(t *testing.T, wrap func(http.Handler) http.Handler) *signOutConsole {
	t.Helper()
	c := &signOutConsole{}
	tokens := append(demo.Tokens(), pigeon.StaticToken{Token: "checkout-auditor-token", Principal: demo.Checkout, Roles: []string{"auditor"}})
	feed := server.NewFeed(0)
	review := pigeon.GateFunc("review", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		if c.hold.Load() && a.Message.Subject == "payments.authorize" {
			return pigeon.Quarantine(pigeon.CodePolicyDenied, "held for review")
		}
		return pigeon.Allow()
	})
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog: demo.Catalog(), Region: "uk", Observer: feed, Gates: []pigeon.Gate{review}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	var h http.Handler = server.New(e, &server.Options{Feed: feed})
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close) // after the browser's (cleanups run last first)
	c.url = ts.URL
	return c
}

// quarantine publishes a payment that the review gate holds and returns
// its quarantine record's id.
func (c *signOutConsole) quarantine(t *testing.T, orderID string) string {
	t.Helper()
	contract := contractOf(t, func(method, path, token, body string, headers ...string) response {
		return doRequest(t, method, c.url+path, token, body, headers...)
	}, "checkout-token", "payments.authorize")
	c.hold.Store(true)
	defer c.hold.Store(false)
	r := doRequest(t, http.MethodPost, c.url+"/v1/messages", "checkout-token", msgBody(t, demo.Payment(orderID)), "x-pigeon-contract", contract)
	require.Equal(t, pigeon.CodePolicyDenied, r.code(t))
	id, _ := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["quarantineId"].(string)
	require.NotEmpty(t, id, "%s", r.body)
	return id
}

// consoleText is what the page holds that the server could have sent:
// the text of the whole document (hidden parts included) and the state
// of its controls.
const consoleText = `document.body.textContent.replace(/\s+/g, " ") + " | verify disabled=" + document.getElementById("verify").disabled +
	" | pause=" + document.getElementById("pause").getAttribute("aria-pressed") +
	" | audit-status class=" + document.getElementById("audit-status").className +
	" | release-result class=" + document.getElementById("release-result").className`

// TestConsoleKeepsNoDataAfterSignOut: once an auditor signs out (or the
// server ends the session), the page holds nothing of what the server
// sent: not the last release's result (record and message ids), not the
// audit chain's verification, not the counts of subscriptions,
// connections, records and contracts, not the principal. A page left
// signed out on a shared screen shows the next person, in the DOM or
// once someone signs in, nothing of the last session.
func TestConsoleKeepsNoDataAfterSignOut(t *testing.T) {
	c := newSignOutConsole(t, nil)
	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(c.url+"/")))
	pristine, err := chromedp.Run(page, chromedp.Evaluate[string](consoleText))
	require.NoError(t, err)
	status := func() string {
		s, err := chromedp.Run(page, chromedp.Evaluate[string](`document.getElementById("conn").textContent`))
		require.NoError(t, err)
		return s
	}
	pristine = strings.Replace(pristine, status(), "", 1)

	require.NoError(t, chromedp.Do(page, chromedp.SendKeys(chromedp.CSS("#token"), "checkout-auditor-token"),
		chromedp.Click(chromedp.CSS("#signin-btn"))))
	poll("the live stream", `document.getElementById("conn").textContent === "live"`)
	id := c.quarantine(t, "o-signout")
	button := `#quarantine tbody tr[data-id="` + id + `"] button`
	poll("an enabled Release button", `(b => !!b && !b.disabled)(document.querySelector('`+button+`'))`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS(button))))
	poll("the release", `document.getElementById("release-result").textContent.startsWith("Released `+id+` as msg_")`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#verify"))))
	poll("the audit chain verified", `document.getElementById("audit-status").textContent.startsWith("holds (")`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#pause"))))
	poll("counts", `document.getElementById("audit-records").textContent !== "0" && document.getElementById("live-contracts").textContent !== "0"`)

	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#signout"))))
	poll("signed out", `document.getElementById("conn").textContent === "signed out" && document.getElementById("app").hidden`)
	after, err := chromedp.Run(page, chromedp.Evaluate[string](consoleText))
	require.NoError(t, err)
	after = strings.Replace(after, status(), "", 1)
	require.NotContains(t, after, id, "the released record's id is kept")
	require.NotContains(t, after, demo.Checkout, "the principal is kept")
	require.Equal(t, pristine, after, "the signed-out page holds what the last session showed")
}

// TestConsoleDropsAnswersArrivingAfterSignOut: an answer to a request the
// page sent while signed in (the quarantine's records, the catalog)
// that arrives after the sign-out is dropped: it must not fill the
// signed-out page's tables with the last session's data.
func TestConsoleDropsAnswersArrivingAfterSignOut(t *testing.T) {
	var (
		mu      sync.Mutex
		holding = true                   // quarantine reads are held (under mu)
		wg      sync.WaitGroup           // the held reads (added to under mu)
		held    = make(chan struct{}, 1) // a quarantine read is being held
		release = make(chan struct{})    // closed: held reads go on
	)
	c := newSignOutConsole(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hold := holding && r.URL.Path == "/v1/quarantine"
			if hold {
				wg.Add(1)
			}
			mu.Unlock()
			if hold {
				defer wg.Done()
				select {
				case held <- struct{}{}:
				default:
				}
				<-release
			}
			h.ServeHTTP(w, r)
		})
	})
	id := c.quarantine(t, "o-late")

	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(c.url+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), "checkout-auditor-token"), chromedp.Click(chromedp.CSS("#signin-btn"))))
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the page never read the quarantine")
	}
	poll("the live stream", `document.getElementById("conn").textContent === "live"`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#signout"))))
	poll("signed out", `document.getElementById("conn").textContent === "signed out" && document.getElementById("app").hidden`)
	mu.Lock()
	holding = false
	mu.Unlock()
	close(release)
	wg.Wait() // the held answers are written
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		text, err := chromedp.Run(page, chromedp.Evaluate[string](consoleText))
		require.NoError(t, err)
		require.NotContains(t, text, id, "an answer of the signed-out session filled the page")
	}
}

// TestConsoleSignsOutWhenThePageIsLeft: the token lives in the page's
// memory only, so leaving the page should end the session. But a browser
// keeps a page it leaves, script state included, in its back/forward
// cache: Back (pressed by whoever sits at the screen next) brought the
// console back signed in, holding the token, reading the live stream. The
// page signs out as it is left (pagehide), so Back shows it signed out,
// and no request carries the token afterwards.
func TestConsoleSignsOutWhenThePageIsLeft(t *testing.T) {
	var back atomic.Bool
	var withToken atomic.Int64 // requests carrying a credential once the page is back
	c := newSignOutConsole(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if back.Load() && r.Header.Get("Authorization") != "" {
				withToken.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	})
	page, poll := consoleBrowser(t)
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(c.url+"/"),
		chromedp.SendKeys(chromedp.CSS("#token"), "auditor-token"), chromedp.Click(chromedp.CSS("#signin-btn"))))
	poll("the live stream", `document.getElementById("conn").textContent === "live"`)

	// Leave for the API page, then come Back. (A script navigation: the
	// page's load events are not waited for, the back/forward cache
	// restoring without them.)
	_, err := chromedp.Run(page, chromedp.Evaluate[bool](`location.href = "/docs"; true`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := chromedp.Run(page, chromedp.Evaluate[string](`location.pathname`))
		return err == nil && p == "/docs"
	}, 20*time.Second, 50*time.Millisecond, "the API page")
	_, err = chromedp.Run(page, chromedp.Evaluate[bool](`history.back(); true`))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := chromedp.Run(page, chromedp.Evaluate[string](`location.pathname`))
		return err == nil && p == "/"
	}, 20*time.Second, 50*time.Millisecond, "the console again")
	back.Store(true)
	time.Sleep(2 * time.Second) // the time to reconnect, were the token kept
	state, err := chromedp.Run(page, chromedp.Evaluate[string](`document.getElementById("conn").textContent + " | app hidden=" +
		document.getElementById("app").hidden + " | " + document.getElementById("who").textContent`))
	require.NoError(t, err)
	require.Equal(t, "signed out | app hidden=true | ", state, "Back brought the signed-in console back")
	require.Zero(t, withToken.Load(), "requests carried the token once the page was back")
}
