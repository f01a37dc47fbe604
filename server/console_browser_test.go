package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
)

// EnvArtifacts names the directory where the browser test saves its
// screenshots; without it they go to the test's temporary directory
// (removed afterwards) and the test logs the path.
const EnvArtifacts = "PIGEON_TEST_ARTIFACTS"

// chromium finds a Chromium or Chrome binary (CHROMIUM names one
// explicitly), or skips the test saying how to install one; under CI,
// where ./test installs it, its absence fails the test instead.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium binary on PATH (nor $CHROMIUM): ./test installs it with scripts/install-chromium.sh")
	}
	t.Skip("no chromium binary on PATH (nor $CHROMIUM): run scripts/install-chromium.sh as root to install Debian's chromium")
	return ""
}

func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		dir = t.TempDir()
	} else {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	return dir
}

// consoleServer is a server with a console feed on a fixed address, which
// the test can stop and start again (a restart, for the page).
type consoleServer struct {
	e    *pigeon.Engine
	feed *server.Feed
	addr string
	srv  *server.Server
	done chan error
}

func (c *consoleServer) start(t *testing.T) {
	t.Helper()
	addr := c.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var l net.Listener
	require.Eventually(t, func() bool { // the old listener's port comes free
		var err error
		l, err = net.Listen("tcp", addr)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	c.addr = l.Addr().String()
	c.srv = server.New(c.e, &server.Options{Feed: c.feed})
	c.done = make(chan error, 1)
	go func() { c.done <- c.srv.Serve(l) }()
}

func (c *consoleServer) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.srv.Shutdown(ctx))
	require.ErrorIs(t, <-c.done, http.ErrServerClosed)
}

// TestConsoleInBrowser drives the console in headless Chromium: a wrong
// token shows a clear message and no data; an auditor who may publish on
// payments.authorize signs in, sees an allow, a deny and a quarantine made
// over the HTTP API appear, releases the quarantined record, sees a
// contract negotiated meanwhile among those in force, and the page
// reconnects by itself across a server restart; an auditor who may not
// publish there sees Release disabled, and the server refuses the release
// anyway. Screenshots at 1280×800 and at phone width are saved (see
// EnvArtifacts).
func TestConsoleInBrowser(t *testing.T) {
	bin := chromium(t)
	dir := artifactDir(t)
	t.Logf("console screenshots: %s", dir)

	tokens := append(demo.Tokens(), pigeon.StaticToken{Token: "checkout-auditor-token", Principal: demo.Checkout, Roles: []string{"auditor"}})
	feed := server.NewFeed(0)
	// A review gate holds payments while the operator says so: a held
	// message is quarantined, and released once the hold is lifted (a
	// release goes through every gate again).
	var hold atomic.Bool
	review := pigeon.GateFunc("review", func(_ context.Context, a *pigeon.Admission) pigeon.Verdict {
		if hold.Load() && a.Message.Subject == "payments.authorize" {
			return pigeon.Quarantine(pigeon.CodePolicyDenied, "held for review")
		}
		return pigeon.Allow()
	})
	e, err := pigeon.New(context.Background(), &pigeon.Options{Authenticator: pigeon.NewStaticTokens(tokens...),
		Catalog: demo.Catalog(), Region: "uk", Observer: feed, Gates: []pigeon.Gate{review}})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Shutdown(context.Background())) }()
	cs := &consoleServer{e: e, feed: feed}
	cs.start(t)
	defer func() { cs.stop(t) }()
	base := "http://" + cs.addr
	call := func(method, path, token, body string, headers ...string) response {
		return doRequest(t, method, base+path, token, body, headers...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	page, cancelPage := chromedp.NewContext(allocCtx)
	defer cancelPage()
	poll := func(what, expr string) {
		t.Helper()
		_, err := chromedp.Run(page, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)))
		require.NoError(t, err, "waiting for %s", what)
	}
	signIn := func(ctx context.Context, token string) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/"),
			chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin-btn"))))
	}

	// A wrong token: a clear message, no data.
	signIn(page, "expired-or-wrong-token")
	poll("the refusal", `document.getElementById("signin-error").textContent.includes("refused")`)
	poll("no data", `document.getElementById("app").hidden && document.querySelectorAll("#decisions tbody tr, #contracts tbody tr").length === 0`)

	// An auditor who may publish on payments.authorize.
	signIn(page, "checkout-auditor-token")
	poll("the console", `!document.getElementById("app").hidden && document.querySelectorAll("#contracts tbody tr").length === 2`)
	poll("the live stream", `document.getElementById("conn").textContent === "live"`)

	checkout := contractOf(t, call, "checkout-token", "payments.authorize")
	publish := func(m *pigeon.Message) response {
		return call(http.MethodPost, "/v1/messages", "checkout-token", msgBody(t, m), "x-pigeon-contract", checkout)
	}
	r := publish(demo.Payment("o-allow"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	noType := demo.Payment("o-deny")
	noType.Type = ""
	r = publish(noType)
	require.Equal(t, pigeon.CodeEnvelopeInvalid, r.code(t))
	quarantineID := func(orderID string) string {
		hold.Store(true)
		defer hold.Store(false)
		r := publish(demo.Payment(orderID))
		require.Equal(t, pigeon.CodePolicyDenied, r.code(t))
		id, _ := r.json(t)["error"].(map[string]any)["details"].(map[string]any)["quarantineId"].(string)
		require.NotEmpty(t, id, "%s", r.body)
		return id
	}
	q1 := quarantineID("o-quarantine")
	poll("allow, deny and quarantine in the decision stream",
		`["allow","deny","quarantine"].every(o => document.querySelector('#decisions tbody tr[data-outcome="'+o+'"]'))`)

	releaseButton := `document.querySelector('#quarantine tbody tr[data-id="` + q1 + `"] button')`
	poll("an enabled Release button", `(b => !!b && !b.disabled && b.getAttribute("aria-label") === "Release `+q1+`")(`+releaseButton+`)`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS(`#quarantine tbody tr[data-id="`+q1+`"] button`))))
	poll("the release", `document.getElementById("release-result").textContent.startsWith("Released `+q1+` as msg_")`)
	poll("the released record", `(b => !!b && b.disabled && b.textContent === "Released")(`+releaseButton+`)`)
	poll("per-subject rates", `!!document.querySelector('#rates tbody tr[data-subject="payments.authorize"]')`)
	// A work queue with a consumer behind: its group and lag appear.
	orders := contractOf(t, call, "orders-token", "notifications.send")
	for _, key := range []string{"n-1", "n-2", "n-3"} {
		r := call(http.MethodPost, "/v1/messages", "orders-token", msgBody(t, demo.Notification(key)), "x-pigeon-contract", orders)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	}
	notifier := contractOf(t, call, "notifier-token", "notifications.send")
	poll("the negotiated contract among those in force", `[...document.querySelectorAll("#negotiated tbody tr")].some(tr => tr.dataset.contract === "`+notifier+`" &&
		tr.cells[1].textContent === "`+demo.Notifier+`" && tr.cells[2].textContent === "token" && tr.cells[3].textContent === "notifications.send")`)
	r = call(http.MethodPost, "/v1/subjects/notifications.send/receive", "notifier-token", `{"max":1,"ack":"explicit"}`, "x-pigeon-contract", notifier)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	poll("what the subject holds", `[...document.querySelectorAll("#held tbody tr")].some(tr => tr.cells[0].textContent === "notifications.send" && tr.cells[1].textContent === "3")`)
	poll("the consumer group's lag", `[...document.querySelectorAll("#groups tbody tr")].some(tr => tr.cells[0].textContent === "notifications.send" && tr.cells[2].textContent === "3" && tr.cells[3].textContent === "1")`)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#verify"))))
	poll("the audit chain verified", `document.getElementById("audit-status").textContent.startsWith("holds (")`)

	// Every control has an accessible name.
	unnamed, err := chromedp.Run(page, chromedp.Evaluate[[]string](`[...document.querySelectorAll("button, input, select")].filter(el => {
		const named = el.getAttribute("aria-label") || (el.labels && el.labels.length) || el.textContent.trim();
		return !named;
	}).map(el => el.outerHTML)`))
	require.NoError(t, err)
	require.Empty(t, unnamed, "controls without an accessible name")

	screenshot := func(name string, width, height int64, mobile bool) {
		t.Helper()
		var vo []chromedp.EmulateViewportOption
		if mobile {
			vo = append(vo, chromedp.EmulateScale(2), chromedp.EmulatePortrait)
		}
		require.NoError(t, chromedp.Do(page, chromedp.EmulateViewport(width, height, vo...)))
		poll("the layout at "+strconv.FormatInt(width, 10)+" px", `document.documentElement.scrollWidth <= window.innerWidth`)
		png, err := chromedp.Run(page, chromedp.FullScreenshot(100)) // quality 100: PNG
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	screenshot("console-wide.png", 1280, 800, false)
	screenshot("console-phone.png", 390, 844, true)
	require.NoError(t, chromedp.Do(page, chromedp.Click(chromedp.CSS("#theme"))))
	poll("the other theme", `document.documentElement.dataset.theme !== undefined`)
	screenshot("console-phone-other-theme.png", 390, 844, true)
	screenshot("console-wide-other-theme.png", 1280, 800, false)

	// A restart: the page reconnects by itself, with the token it holds.
	cs.stop(t)
	poll("the disconnection", `document.getElementById("conn").textContent.includes("reconnecting")`)
	cs.start(t)
	poll("the reconnection", `document.getElementById("conn").textContent === "live"`)
	r = publish(demo.Payment("o-after-restart"))
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	poll("a decision after the restart", `document.querySelectorAll('#decisions tbody tr[data-outcome="allow"]').length >= 2`)

	// A flood of decisions (about 10,000 a second for two seconds): the
	// page samples it, keeps at most 500 rows and still answers.
	flood := time.NewTicker(10 * time.Millisecond)
	for range 200 {
		<-flood.C
		for range 100 {
			feed.Audited(pigeon.AuditRecord{Type: string(pigeon.EventPublishDenied), Outcome: "deny", Code: "SCHEMA_INVALID",
				Gate: "schema", Subject: "payments.authorize", Principal: demo.Checkout, Time: time.Now()})
		}
	}
	flood.Stop()
	poll("the sample's note", `document.getElementById("skipped").textContent.includes("not shown")`)
	rows, err := chromedp.Run(page, chromedp.Evaluate[int](`document.querySelectorAll("#decisions tbody tr").length`))
	require.NoError(t, err)
	require.LessOrEqual(t, rows, 500)
	require.NoError(t, chromedp.Do(page, chromedp.SendKeys(chromedp.CSS("#filter"), "schema_inv")))
	poll("the filter", `(rows => rows.length > 0 && rows.every(tr => tr.textContent.includes("SCHEMA_INVALID")))([...document.querySelectorAll("#decisions tbody tr")])`)
	_, err = chromedp.Run(page, chromedp.Evaluate[bool](`(s => { s.value = "allow"; return s.dispatchEvent(new Event("change")); })(document.getElementById("outcome"))`))
	require.NoError(t, err)
	poll("the outcome filter", `document.querySelectorAll("#decisions tbody tr").length === 0`)

	// An auditor who may not publish on payments.authorize: Release is
	// disabled, and the server refuses the release anyway.
	other, cancelOther := chromedp.NewContext(page)
	defer cancelOther()
	signIn(other, "auditor-token")
	q2 := quarantineID("o-quarantine-2")
	_, err = chromedp.Run(other, chromedp.Poll[bool](`(b => !!b && b.disabled)(document.querySelector('#quarantine tbody tr[data-id="`+q2+`"] button'))`,
		chromedp.WithPollingTimeout(20*time.Second)))
	require.NoError(t, err, "a disabled Release button for a principal that may not release")
	r = call(http.MethodPost, "/v1/quarantine/"+q2+"/release", "auditor-token", "{}", "x-pigeon-contract", checkout)
	require.Equal(t, pigeon.CodeContractPrincipalMismatch, r.code(t), "another's contract")
	r = call(http.MethodPost, "/v1/contracts", "auditor-token", `{"subjects":["payments.authorize"]}`)
	require.GreaterOrEqual(t, r.status, 400, "no contract to publish there: %s", r.body)
	r = call(http.MethodPost, "/v1/quarantine/"+q2+"/release", "orders-token", "{}")
	require.Equal(t, pigeon.CodeForbidden, r.code(t), "not an auditor")
	rec := call(http.MethodGet, "/v1/quarantine/"+q2, "auditor-token", "")
	require.Equal(t, false, rec.json(t)["record"].(map[string]any)["released"])

	// The API page, rendered from openapi.yaml on the server.
	require.NoError(t, chromedp.Do(page, chromedp.Navigate(base+"/docs")))
	poll("the API page", `document.querySelectorAll("main section").length > 30 && document.body.textContent.includes("POST /v1/quarantine/{id}/release")`)
	screenshot("docs-wide.png", 1280, 800, false)

	cancelOther()
	cancelPage()
	cancelAlloc()
	if err := chromedp.Cancel(page); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("closing the browser: %v", err)
	}
}

// contractOf negotiates a contract for token over the API at call.
func contractOf(t *testing.T, call func(method, path, token, body string, headers ...string) response, token string, subjects ...string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"subjects": subjects})
	require.NoError(t, err)
	r := call(http.MethodPost, "/v1/contracts", token, string(b))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	return r.json(t)["contract"].(map[string]any)["id"].(string)
}
