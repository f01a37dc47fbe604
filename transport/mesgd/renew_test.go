package mesgd_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/mesgd"
)

// clockFixture is a broker on a fake clock with a chat subject whose
// publish and receive rules name alice and bob, and whose publish
// rule alone names paul, served by a mesgd endpoint on the same clock.
type clockFixture struct {
	base    string
	e       *pigeon.Engine
	clock   *testclock.Clock
	srv     *mesgd.Server
	expires atomic.Pointer[time.Time] // when credentials expire (nil: never)
	armed   chan time.Time            // each time a renewal loop waits until a new time
}

func chatPolicy(version string) pigeon.SubjectPolicy {
	both := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob"}}}
	pub := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob", "paul"}}}
	return pigeon.SubjectPolicy{
		Name: "chat", Version: version, Mode: pigeon.ModePubSub, Intents: []string{"chat"},
		Data:   pigeon.DataPolicy{ForbiddenFields: []string{"password"}},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: pub, pigeon.OpReceive: both},
	}
}

// newClockFixture takes funcs of *pigeon.Options and *mesgd.Options to
// configure the engine and the endpoint.
func newClockFixture(t *testing.T, configure ...any) *clockFixture {
	t.Helper()
	ctx := context.Background()
	f := &clockFixture{clock: testclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), armed: make(chan time.Time, 64)}
	static := pigeon.NewStaticTokens(
		pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
		pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		pigeon.StaticToken{Token: "paul-token", Principal: "paul"},
	)
	auth := pigeon.AuthenticatorFunc(func(ctx context.Context, credential string) (*pigeon.Principal, error) {
		p, err := static.Authenticate(ctx, credential)
		if err != nil {
			return nil, err
		}
		q := *p
		if at := f.expires.Load(); at != nil {
			q.Expires = *at
		}
		return &q, nil
	})
	eo := &pigeon.Options{
		Authenticator: auth,
		Now:           f.clock.Now,
		Catalog:       &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{chatPolicy("v1")}},
	}
	for _, fn := range configure {
		if fn, ok := fn.(func(*pigeon.Options)); ok {
			fn(eo)
		}
	}
	e, err := pigeon.New(ctx, eo)
	require.NoError(t, err)
	f.e = e
	o := mesgd.Options{Subject: "chat", Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, fn := range configure {
		if fn, ok := fn.(func(*mesgd.Options)); ok {
			fn(&o)
		}
	}
	f.srv = mesgd.New(e, o)
	mesgd.SetClock(f.srv, f.clock.Now, 2*time.Millisecond, func(until time.Time) {
		select {
		case f.armed <- until:
		default:
		}
	})
	hs := httptest.NewServer(f.srv)
	f.base = hs.URL
	stopAtEnd(t, f.srv, hs, e)
	return f
}

// dialReady dials path as alice and waits for the connection to run (its
// renewal armed on the clock as it reads now): a frame round-trips.
func (f *clockFixture) dialReady(t *testing.T, path string) *websocket.Conn {
	t.Helper()
	c := dialMesgd(t, f.base, path, "alice-token", true)
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	return c
}

// next waits for the (only) renewal loop to wait until a new time, and
// returns it: the clock may move then, the loop reads it as it moves.
func (f *clockFixture) next(t *testing.T) time.Time {
	t.Helper()
	select {
	case until := <-f.armed:
		return until
	case <-time.After(10 * time.Second):
		t.Fatal("the renewal loop did not wait again")
		return time.Time{}
	}
}

// to moves the clock to at.
func (f *clockFixture) to(at time.Time) { f.clock.Advance(at.Sub(f.clock.Now())) }

// contractOf waits for the live contract of principal and returns it.
func (f *clockFixture) contractOf(t *testing.T, principal string) pigeon.LiveContract {
	t.Helper()
	var got pigeon.LiveContract
	require.Eventually(t, func() bool {
		live, _, err := f.e.LiveContracts(context.Background(), 100)
		require.NoError(t, err)
		for _, k := range live {
			if k.Principal == principal {
				got = k
				return true
			}
		}
		return false
	}, 10*time.Second, 2*time.Millisecond)
	return got
}

func (f *clockFixture) audited(t *testing.T, ev pigeon.Event, contract string) int {
	t.Helper()
	recs, err := f.e.Audit(context.Background(), 0, 100000)
	require.NoError(t, err)
	n := 0
	for _, r := range recs {
		if r.Type == string(ev) && r.ContractID == contract {
			n++
		}
	}
	return n
}

// requireClosed reads c until it ends and requires the close status and
// reason.
func requireClosed(t *testing.T, c *websocket.Conn, status websocket.StatusCode, reason pigeon.Code) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err == nil {
			t.Logf("frame before the close: %.80s", b)
			continue
		}
		requireCloseError(t, err, status, reason)
		return
	}
}

// requireCloseError requires err, a read's, to be the close status with
// reason the code.
func requireCloseError(t *testing.T, err error, status websocket.StatusCode, reason pigeon.Code) {
	t.Helper()
	require.Equal(t, status, websocket.CloseStatus(err), "%v", err)
	var ce websocket.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, string(reason), ce.Reason)
}

// TestContractRenewedInPlace: a mesgd connection renews its contract in
// place before it expires, as a session does (pigeon.RenewDelay), so that
// it outlives the contract TTL: past the first expiry its frames are
// still published under the same contract id and delivered back. Before,
// it was never renewed, and a long-lived subscriber was cut at the TTL.
func TestContractRenewedInPlace(t *testing.T) {
	f := newClockFixture(t)
	start := f.clock.Now()
	c := f.dialReady(t, "/mesgd/room=lobby")
	k := f.contractOf(t, "alice")
	require.Equal(t, start.Add(pigeon.DefaultContractTTL), k.ExpiresAt)
	at := f.next(t)
	require.Equal(t, k.ExpiresAt.Add(-pigeon.RenewLead(pigeon.DefaultContractTTL)), at, "renews a tenth of the life ahead")

	exp := k.ExpiresAt
	for i := 1; i <= 4; i++ { // an hour on
		f.to(at)
		at = f.next(t)
		require.Equal(t, i, f.audited(t, pigeon.EventContractRenewed, k.ID), "renewal %d", i)
		renewed := f.contractOf(t, "alice")
		require.Equal(t, k.ID, renewed.ID, "renewed in place")
		require.True(t, renewed.ExpiresAt.After(exp), "renewal %d: %v", i, renewed.ExpiresAt)
		exp = renewed.ExpiresAt
	}
	require.True(t, f.clock.Now().After(k.ExpiresAt.Add(30*time.Minute)))
	send(t, c, `{"room":"lobby","text":"an hour on"}`)
	require.Equal(t, "an hour on", readFrame(t, c)["text"])
	require.Zero(t, f.audited(t, pigeon.EventContractDenied, k.ID))
}

// TestRenewalStopsAtTheCredential: a contract is renewed only as far as
// the connection's credential goes; then it is not tried again, and at
// its expiry the connection is closed with 1008 CONTRACT_EXPIRED, idle as
// it is. Before, an idle connection stayed up past its contract.
func TestRenewalStopsAtTheCredential(t *testing.T) {
	f := newClockFixture(t)
	end := f.clock.Now().Add(20 * time.Minute)
	f.expires.Store(&end)
	c := f.dialReady(t, "/mesgd/room=lobby")
	k := f.contractOf(t, "alice")

	f.to(f.next(t))
	at := f.next(t)
	require.True(t, f.contractOf(t, "alice").ExpiresAt.Equal(end), "renewed up to the credential's end")
	f.to(at) // renews again: it cannot go further
	at = f.next(t)
	require.True(t, at.Equal(end), "then it waits for the expiry: %v", at)
	send(t, c, `{"room":"lobby","text":"almost over"}`)
	require.Equal(t, "almost over", readFrame(t, c)["text"])
	require.Equal(t, 1, f.audited(t, pigeon.EventContractRenewed, k.ID))
	require.Zero(t, f.audited(t, pigeon.EventContractDenied, k.ID))

	f.to(end)
	requireClosed(t, c, websocket.StatusPolicyViolation, pigeon.CodeContractExpired)
}

// TestRenewalRefusedForGood: a renewal refused for a reason that will not
// pass (here CONTRACT_STALE: the subject's policy changed) is not tried
// again; a connection with no subscription for the change to end (paul's
// may only publish) goes on to the contract's expiry and is then closed
// with 1008 CONTRACT_EXPIRED, for the client to reconnect and negotiate
// under the new policy.
func TestRenewalRefusedForGood(t *testing.T) {
	f := newClockFixture(t)
	c := dialMesgd(t, f.base, "/mesgd/room=lobby", "paul-token", true)
	k := f.contractOf(t, "paul")
	renewAt := f.next(t)
	require.NoError(t, f.e.ReplaceSubject(context.Background(), chatPolicy("v2")))

	f.to(renewAt)
	at := f.next(t)
	require.Equal(t, 1, f.audited(t, pigeon.EventContractDenied, k.ID), "the renewal was refused")
	require.True(t, at.Equal(k.ExpiresAt), "no retry: it waits for the expiry (%v)", at)
	require.Zero(t, f.audited(t, pigeon.EventContractRenewed, k.ID))

	f.to(at)
	requireClosed(t, c, websocket.StatusPolicyViolation, pigeon.CodeContractExpired)
	require.Equal(t, 1, f.audited(t, pigeon.EventContractDenied, k.ID), "a final refusal is not tried again")
}

// TestPolicyChangeClosesSubscriber: a subscriber's connection whose
// contract goes stale (the subject's policy replaced) is closed at once
// with 1008 CONTRACT_STALE, its subscription ended by the change, not at
// the contract's expiry or its next delivery.
func TestPolicyChangeClosesSubscriber(t *testing.T) {
	f := newClockFixture(t)
	c := f.dialReady(t, "/mesgd/room=lobby")
	require.NoError(t, f.e.ReplaceSubject(context.Background(), chatPolicy("v2")))
	requireClosed(t, c, websocket.StatusPolicyViolation, pigeon.CodeContractStale)
}

// TestRenewalRetried: a renewal that fails for a reason that may pass
// (RATE_LIMITED here: renewals count toward the negotiation rate) is
// tried again soon (pigeon.RenewRetry), and succeeds then.
func TestRenewalRetried(t *testing.T) {
	f := newClockFixture(t, func(o *pigeon.Options) {
		o.NegotiateRate = pigeon.RateLimitPolicy{PerSecond: 1.0 / 850, Burst: 1} // the next token at 14:10
	})
	c := f.dialReady(t, "/mesgd/room=lobby")
	k := f.contractOf(t, "alice")
	at := f.next(t)
	for tries := 1; f.audited(t, pigeon.EventContractRenewed, k.ID) == 0; tries++ {
		require.Less(t, tries, 20, "renewed at last")
		require.True(t, at.Before(k.ExpiresAt))
		f.to(at)
		next := f.next(t)
		if f.audited(t, pigeon.EventContractRenewed, k.ID) == 0 {
			require.Equal(t, tries, f.audited(t, pigeon.EventContractDenied, k.ID))
			require.Equal(t, at.Add(pigeon.RenewRetry(k.ExpiresAt.Sub(at))), next, "tried again after RenewRetry")
		}
		at = next
	}
	f.to(k.ExpiresAt.Add(time.Minute))
	send(t, c, `{"room":"lobby","text":"past the first expiry"}`)
	require.Equal(t, "past the first expiry", readFrame(t, c)["text"])
}

// revocationFixture is a clock fixture with alice's connection on
// room=lobby (c, its contract k) and a session of bob's publishing on the
// subject, closed at the test's end.
func revocationFixture(t *testing.T) (*clockFixture, *websocket.Conn, pigeon.LiveContract, pigeon.Session) {
	f := newClockFixture(t)
	c := f.dialReady(t, "/mesgd/room=lobby")
	k := f.contractOf(t, "alice")
	bob, err := f.e.Connect(context.Background(), "bob-token", []string{"chat"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bob.Close(context.Background()) })
	return f, c, k, bob
}

// TestRevocationCutsTheStream: a contract revoked while messages stream
// to the connection cuts it at once: nothing published after the
// revocation returned is delivered, and the connection is closed with
// 1008 CONTRACT_REVOKED (the renewal changes none of it).
func TestRevocationCutsTheStream(t *testing.T) {
	f, c, k, bob := revocationFixture(t)
	ctx := context.Background()

	var (
		published atomic.Int64 // the last n published
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	wg.Go(func() {
		for n := int64(1); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			_, err := bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
				Data: json.RawMessage(`{"room":"lobby","n":` + strconv.FormatInt(n, 10) + `}`)})
			if err != nil {
				return
			}
			published.Store(n)
			time.Sleep(time.Millisecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	for range 5 { // the stream runs
		readFrame(t, c)
	}
	require.NoError(t, f.e.RevokeContract(ctx, &pigeon.Principal{ID: "alice"}, k.ID))
	last := published.Load() + 1 // one may be on its way while the revocation runs

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(rctx)
		if err != nil {
			requireCloseError(t, err, websocket.StatusPolicyViolation, pigeon.CodeContractRevoked)
			break
		}
		var v struct{ N int64 }
		require.NoError(t, json.Unmarshal(b, &v))
		require.LessOrEqual(t, v.N, last, "a frame published after the revocation was delivered")
	}
}

// TestRevocationDuringABlockedWrite: a revocation that comes while a
// delivery's write waits on a client that reads slowly still ends the
// connection with 1008 CONTRACT_REVOKED once the client reads on. Before,
// the write ran under the delivery's context, which the revocation
// cancels: the library dropped the connection mid-frame, and the client
// saw EOF, never learning why.
func TestRevocationDuringABlockedWrite(t *testing.T) {
	f, c, k, bob := revocationFixture(t)
	ctx := context.Background()
	pad := strings.Repeat("x", 256<<10)
	for n := range 64 { // 16 MiB the client does not read: the socket fills
		_, err := bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
			Data: json.RawMessage(`{"room":"lobby","n":` + strconv.Itoa(n) + `,"pad":"` + pad + `"}`)})
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond) // a write is blocked now
	require.NoError(t, f.e.RevokeContract(ctx, &pigeon.Principal{ID: "alice"}, k.ID))
	c.SetReadLimit(1 << 20)
	requireClosed(t, c, websocket.StatusPolicyViolation, pigeon.CodeContractRevoked)
}

// TestPublishOnlyConnectionEndsWithItsContract: a connection that may
// only publish has no subscription to end with its contract; a frame
// refused because the contract is over (revoked here) closes it with 1008
// and the code, as a subscriber's is, instead of refusing every frame
// after it one by one. Before, it stayed up.
func TestPublishOnlyConnectionEndsWithItsContract(t *testing.T) {
	f := newClockFixture(t)
	c := dialMesgd(t, f.base, "/mesgd/room=lobby", "paul-token", true)
	k := f.contractOf(t, "paul")
	require.NoError(t, f.e.RevokeContract(context.Background(), &pigeon.Principal{ID: "paul"}, k.ID))
	send(t, c, `{"room":"lobby","text":"anyone?"}`)
	requireClosed(t, c, websocket.StatusPolicyViolation, pigeon.CodeContractRevoked)
}

// TestRoutePathEscapes: the route path is split on '/' before it is
// unescaped, so that %2F is a '/' inside a value, not a new segment; an
// escape of a character the selector syntax reserves is that character
// literally. Before, net/http's decoded path made /room=a%2Fb the two
// segments room=a and b, and /room=%2A the presence test of room.
func TestRoutePathEscapes(t *testing.T) {
	f := newClockFixture(t)
	for _, tc := range []struct {
		path, hit, miss string
	}{
		{"/mesgd/room=a%2Fb", `{"room":"a/b","n":1}`, `{"room":"a","b":true,"n":0}`},
		{"/mesgd/room=%2A", `{"room":"*","n":1}`, `{"room":"lobby","n":0}`},
		{"/mesgd/room=50%25", `{"room":"50%","n":1}`, `{"room":"50","n":0}`},
		{"/mesgd/a%2Eb=c", `{"a.b":"c","n":1}`, `{"a":{"b":"c"},"n":0}`},
		{"/mesgd/room=caf%C3%A9%20bar", `{"room":"café bar","n":1}`, `{"room":"café","n":0}`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			c := dialMesgd(t, f.base, tc.path, "alice-token", true)
			send(t, c, tc.miss)
			send(t, c, tc.hit)
			require.Equal(t, float64(1), readFrame(t, c)["n"], "only the frame whose value holds the escaped character")
			_ = c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

// TestRoutePathRefusals: a route path that is no selector is refused 400
// SELECTOR_INVALID before the upgrade, its credential unread.
func TestRoutePathRefusals(t *testing.T) {
	f := newClockFixture(t)
	for _, path := range []string{
		"/mesgd/room=%FF",   // not UTF-8
		"/mesgd/room=%C3",   // a truncated UTF-8 sequence
		"/mesgd/room=a%00b", // a control character
		"/mesgd/room=a%0Ab", // a control character
		"/mesgd/room=*x",    // a bare '*' inside a value
		"/mesgd/=lobby",     // an empty key
	} {
		req, err := http.NewRequest(http.MethodGet, f.base+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body struct{ Error struct{ Code string } }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		require.Equal(t, string(pigeon.CodeSelectorInvalid), body.Error.Code, path)
	}
}

// TestUnansweredPingsDropTheConnection: the server pings each connection
// and drops one whose pong does not come back, and with it its contract,
// which it would otherwise renew for a peer long gone (a half-open TCP
// connection); one that answers stays up. Before, there was no keepalive.
func TestUnansweredPingsDropTheConnection(t *testing.T) {
	f := newClockFixture(t, func(o *mesgd.Options) {
		o.PingInterval, o.PingTimeout = 20*time.Millisecond, time.Second
	})
	answering := dialMesgd(t, f.base, "/mesgd/room=nowhere", "bob-token", true)
	rctx := answering.CloseRead(context.Background()) // reads, and so answers pings
	f.contractOf(t, "bob")
	mute := dialMesgd(t, f.base, "/mesgd/room=lobby", "alice-token", true) // never reads
	f.contractOf(t, "alice")
	require.Eventually(t, func() bool {
		live, _, err := f.e.LiveContracts(context.Background(), 100)
		require.NoError(t, err)
		return len(live) == 1 && live[0].Principal == "bob"
	}, 10*time.Second, 5*time.Millisecond, "the mute connection was dropped, its contract revoked")
	require.NoError(t, rctx.Err(), "the answering connection is up")
	require.NoError(t, answering.Ping(context.Background()))
	_ = mute
}

// TestRoutePathEscapesThroughTheServer: the broker's mux hands the path
// on escaped, so /mesgd/room=a%2Fb reaches the endpoint as one segment.
func TestRoutePathEscapesThroughTheServer(t *testing.T) {
	base, _ := startServer(t)
	c := dialMesgd(t, base, "/mesgd/room=a%2Fb", "alice-token", true)
	send(t, c, `{"room":"a","b":true,"n":0}`)
	send(t, c, `{"room":"a/b","n":1}`)
	require.Equal(t, float64(1), readFrame(t, c)["n"])
}

// TestOversizedFrameCloses: a frame over MaxFrame closes the connection
// with 1009 before it is read whole.
func TestOversizedFrameCloses(t *testing.T) {
	f := newClockFixture(t, func(o *mesgd.Options) { o.MaxFrame = 1 << 10 })
	c := f.dialReady(t, "/mesgd/room=lobby")
	big := `{"room":"lobby","pad":"` + strings.Repeat("x", 2<<10) + `"}`
	_ = c.Write(context.Background(), websocket.MessageText, []byte(big))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	require.Equal(t, websocket.StatusMessageTooBig, websocket.CloseStatus(err), "%v", err)
}
