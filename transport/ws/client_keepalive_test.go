package ws_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// The client's keepalive (WithPingInterval, WithPingTimeout) and the floor
// on its renewals, against servers that misbehave in the ways the network
// or a hostile broker can.

// hangBound is how long a call may take before the test calls it hung:
// far past any ping interval and timeout the tests use, on any machine.
const hangBound = 20 * time.Second

// rawServer serves each WebSocket connection with serve, which runs until
// it returns or ctx (the test's) ends. It returns the server's ws:// URL.
func rawServer(t *testing.T, serve func(ctx context.Context, c *websocket.Conn)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ws.Subprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(-1)
		serve(ctx, c)
	}))
	t.Cleanup(func() { cancel(); hs.Close() })
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}

// contractAnswer answers re with contract ctr_1 expiring at exp.
func contractAnswer(re string, exp time.Time) []byte {
	return []byte(`{"op":"contract","re":"` + re + `","contract":{"id":"ctr_1","principal":"p","subjects":[],"expiresAt":"` +
		exp.UTC().Format(time.RFC3339Nano) + `"}}`)
}

// readFrame reads and decodes one frame; nil when the connection ends.
func readFrame(ctx context.Context, c *websocket.Conn) *ws.Frame {
	_, b, err := c.Read(ctx)
	if err != nil {
		return nil
	}
	f, err := ws.DecodeFrame(b)
	if err != nil {
		return nil
	}
	return f
}

// negotiated answers the connection's negotiate with a contract that
// outlives the test; false when the connection ended first.
func negotiated(ctx context.Context, c *websocket.Conn) bool {
	f := readFrame(ctx, c)
	return f != nil && f.Op == ws.OpNegotiate && c.Write(ctx, websocket.MessageText, contractAnswer(f.ID, time.Now().Add(time.Hour))) == nil
}

// logCount counts the log records whose message holds a word.
type logCount struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }
func (l *logCount) count(word string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, word) {
			n++
		}
	}
	return n
}

// tcpProxy forwards TCP connections to a server. freeze makes the
// connections open then swallow every byte both ways, as a network that
// dropped them without a word would (a half-open connection: writes
// succeed, nothing comes back); connections made later are not frozen.
// up counts the bytes the client sent since the last mark.
type tcpProxy struct {
	ln     net.Listener
	target string
	up     atomic.Int64
	mu     sync.Mutex
	conns  []net.Conn
	frozen []*atomic.Bool
}

func newTCPProxy(t *testing.T, wsURL string) (*tcpProxy, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: strings.TrimPrefix(wsURL, "ws://")}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			frozen := new(atomic.Bool)
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.frozen = append(p.frozen, frozen)
			p.mu.Unlock()
			go p.pipe(s, c, frozen, &p.up)
			go p.pipe(c, s, frozen, nil)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	return p, "ws://" + ln.Addr().String()
}

// pipe copies src to dst until either ends, swallowing what it reads once
// frozen; count, when set, counts the bytes read.
func (p *tcpProxy) pipe(dst, src net.Conn, frozen *atomic.Bool, count *atomic.Int64) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if count != nil {
			count.Add(int64(n))
		}
		if n > 0 && !frozen.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *tcpProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frozen {
		f.Store(true)
	}
}

// sent returns the bytes the client sent since the last call.
func (p *tcpProxy) sent() int64 { return p.up.Swap(0) }

// callResult runs call in a goroutine and returns its error, failing the
// test when it takes longer than hangBound: a call that waits for ever.
func callResult(t *testing.T, call func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- call() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(hangBound):
		t.Fatalf("the call still waits after %s: the lost connection went unnoticed", hangBound)
		return nil
	}
}

// TestClientPingEndsSilentConnection: a connection on which nothing comes
// back (a server that stopped reading, so answers no ping; a network that
// swallows every byte, as a half-open TCP connection does) ends
// SESSION_CLOSED once a ping goes unanswered, logged once: a Receive or
// Publish with context.Background() fails instead of waiting for ever,
// Done is closed, and Reconnect dials again. Before, the Go client never
// pinged: both calls waited for ever.
func TestClientPingEndsSilentConnection(t *testing.T) {
	const interval, timeout = 50 * time.Millisecond, 200 * time.Millisecond
	t.Run("server stops reading", func(t *testing.T) {
		url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
			if negotiated(ctx, c) {
				<-ctx.Done() // reads nothing more: no pong ever
			}
		})
		logs := &logCount{}
		s := dialChat(t, url, ws.WithPingInterval(interval), ws.WithPingTimeout(timeout), ws.WithLogger(slog.New(logs)))
		start := time.Now()
		err := callResult(t, func() error {
			_, err := s.Receive(context.Background(), "chat.messages", 1)
			return err
		})
		requireCodeOf(t, err, pigeon.CodeSessionClosed)
		require.Contains(t, err.Error(), "ping")
		t.Logf("detected after %s (interval %s, timeout %s)", time.Since(start), interval, timeout)
		<-s.Done()
		requireCodeOf(t, s.Err(), pigeon.CodeSessionClosed)
		_, err = s.Publish(context.Background(), chatMsg("late"))
		requireCodeOf(t, err, pigeon.CodeSessionClosed)
		require.Equal(t, 1, logs.count("ping"), "logged once")
	})
	t.Run("network swallows bytes", func(t *testing.T) {
		cs := newConnServer(t, func(_ int, f *ws.Frame) []string {
			if f.Op == ws.OpReceive {
				return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
			}
			return nil
		})
		proxy, url := newTCPProxy(t, cs.url)
		s := dialChat(t, url, ws.WithPingInterval(interval), ws.WithPingTimeout(timeout))
		_, err := s.Receive(context.Background(), "chat.messages", 1)
		require.NoError(t, err, "answered while the network carries bytes")

		proxy.freeze()
		err = callResult(t, func() error {
			_, err := s.Publish(context.Background(), chatMsg("lost"))
			return err
		})
		requireCodeOf(t, err, pigeon.CodeSessionClosed)
		<-s.Done()

		require.NoError(t, s.Reconnect(context.Background()))
		_, err = s.Receive(context.Background(), "chat.messages", 1)
		require.NoError(t, err, "the new connection works")
		require.NoError(t, s.Err())
	})
}

// TestClientPingKeepsAnsweredConnection: an idle connection whose server
// answers pings (as every WebSocket library does while it reads) is pinged
// and kept, for many intervals, and works after.
func TestClientPingKeepsAnsweredConnection(t *testing.T) {
	cs := newConnServer(t, func(_ int, f *ws.Frame) []string {
		if f.Op == ws.OpReceive {
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
		}
		return nil
	})
	proxy, url := newTCPProxy(t, cs.url)
	// A generous timeout: an answer late by seconds on a loaded machine
	// must not end the connection.
	s := dialChat(t, url, ws.WithPingInterval(20*time.Millisecond), ws.WithPingTimeout(5*time.Second))
	proxy.sent()
	eventually(t, func() bool { return proxy.up.Load() > 0 }, "the idle client pings")
	time.Sleep(300 * time.Millisecond) // many intervals, idle
	require.NoError(t, s.Err(), "an answered ping keeps the connection")
	select {
	case <-s.Done():
		t.Fatal("the connection ended")
	default:
	}
	_, err := s.Receive(context.Background(), "chat.messages", 1)
	require.NoError(t, err)
}

// TestClientPingDisabled: WithPingInterval(0) (or negative) sends no ping:
// an idle client on a connection that swallows every byte sends nothing
// and keeps it.
func TestClientPingDisabled(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		cs := newConnServer(t, func(int, *ws.Frame) []string { return nil })
		proxy, url := newTCPProxy(t, cs.url)
		s, err := ws.Dial(context.Background(), url, "token", []string{"chat.messages"},
			ws.WithPingInterval(d), ws.WithPingTimeout(10*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() {
			// The server never hears the close: give up on it soon.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
			defer cancel()
			_ = s.Close(ctx)
		})
		proxy.freeze()
		proxy.sent()
		time.Sleep(300 * time.Millisecond)
		require.Zero(t, proxy.sent(), "interval %s: nothing sent", d)
		require.NoError(t, s.Err(), "interval %s", d)
	}
}

// TestClientPingOnlyWhenIdle: a connection that reads frames more often
// than the ping interval never pings: the client sends nothing while the
// server pushes a frame every few milliseconds for twice the interval,
// and then, idle, pings.
func TestClientPingOnlyWhenIdle(t *testing.T) {
	const interval = time.Second
	var pushing atomic.Bool
	pushing.Store(true)
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		if !negotiated(ctx, c) {
			return
		}
		go func() { // answers pings, and reads what comes
			for readFrame(ctx, c) != nil {
			}
		}()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for pushing.Load() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A frame with no "re" and no error: the client drops it.
			if c.Write(ctx, websocket.MessageText, []byte(`{"op":"pong"}`)) != nil {
				return
			}
		}
		<-ctx.Done()
	})
	proxy, purl := newTCPProxy(t, url)
	s, err := ws.Dial(context.Background(), purl, "token", []string{"chat.messages"},
		ws.WithPingInterval(interval), ws.WithPingTimeout(hangBound))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	proxy.sent()
	time.Sleep(2*interval + interval/2)
	require.Zero(t, proxy.sent(), "a busy connection pings not")
	pushing.Store(false)
	eventually(t, func() bool { return proxy.up.Load() > 0 }, "the idle client pings")
	require.NoError(t, s.Err())
}

// renewServer answers negotiate with a contract expiring first after
// now, and each renew with the expiry next(previous expiry) returns; it
// counts the renew frames.
func renewServer(t *testing.T, first time.Duration, next func(prev time.Time) time.Time) (url string, renews *atomic.Int64) {
	renews = new(atomic.Int64)
	url = rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		var exp time.Time
		for {
			f := readFrame(ctx, c)
			if f == nil {
				return
			}
			var ans []byte
			switch f.Op {
			case ws.OpNegotiate:
				exp = time.Now().Add(first)
				ans = contractAnswer(f.ID, exp)
			case ws.OpRenew:
				renews.Add(1)
				exp = next(exp)
				ans = contractAnswer(f.ID, exp)
			default:
				continue
			}
			if c.Write(ctx, websocket.MessageText, ans) != nil {
				return
			}
		}
	})
	return url, renews
}

// TestRenewalFloor: a server that grants renewals a few milliseconds long
// cannot drive the client's renewal loop: renewals of one contract are a
// floor apart at least (a quarter of the negotiated lifetime, 100 ms to
// 1 s), and one that would come after the expiry does not come, the
// contract ending at its expiry (logged once). Before, each answer moving
// the expiry 5 ms made the session renew every few milliseconds, for
// ever. A session whose contracts are short, asked for or granted, still
// renews each, in time, as often as it needs.
func TestRenewalFloor(t *testing.T) {
	const window = 1500 * time.Millisecond
	t.Run("tiny extensions", func(t *testing.T) {
		// Negotiated for 150 ms (measured from the negotiation the
		// client asked, so 150 ms or more): the floor is 100 ms (a
		// quarter is less). The first renewal comes at half the life
		// left, 75 ms after the negotiation at the earliest, and moves
		// the expiry 5 ms, to 155 ms after it: the floor puts the next
		// at 175 ms at the earliest, past the expiry, however late the
		// first came, so none comes and the end is logged. The end does
		// not hang on when a timer fires. (With 200 ms, the floor put
		// the second renewal 5 ms before the expiry: a timer 5 ms late,
		// as on a loaded machine, let the contract lapse with no
		// renewal due and nothing logged.)
		url, renews := renewServer(t, 150*time.Millisecond, func(prev time.Time) time.Time { return prev.Add(5 * time.Millisecond) })
		logs := &logCount{}
		s := dialChat(t, url, ws.WithLogger(slog.New(logs)))
		eventually(t, func() bool { return logs.count("too short") > 0 }, "the end is logged")
		// Logged, the contract is renewed no more: wait out its expiry,
		// which a renewal after the log would have to come before.
		exp := s.Contract().ExpiresAt()
		eventually(t, func() bool { return time.Now().After(exp) }, "the contract expired")
		n := renews.Load()
		t.Logf("%d renewals", n)
		require.Equal(t, int64(1), n, "the first renewal comes before the expiry; the next would come after it, and does not")
		require.Equal(t, 1, logs.count("too short"), "the end is logged once")
	})
	t.Run("short contracts granted", func(t *testing.T) {
		// Each contract is granted 400 ms, without the client asking for
		// it: the floor is 100 ms (it was 1 s, which let the contract
		// lapse after one renewal), and it is kept renewed every 200 ms
		// or so.
		url, renews := renewServer(t, 400*time.Millisecond, func(time.Time) time.Time { return time.Now().Add(400 * time.Millisecond) })
		logs := &logCount{}
		s := dialChat(t, url, ws.WithLogger(slog.New(logs)))
		first := s.Contract().ExpiresAt()
		// The server counts a renewal as it reads it, before the client
		// reads its answer: wait for the session's contract to move.
		eventually(t, func() bool { return s.Contract().ExpiresAt().After(first) }, "renewed before it expired")
		require.Positive(t, renews.Load())
		time.Sleep(window)
		n := renews.Load()
		t.Logf("%d renewals in %s", n, window)
		require.GreaterOrEqual(t, n, int64(3), "kept renewed")
		require.LessOrEqual(t, n, int64(16), "100 ms apart at least")
		require.Zero(t, logs.count("too short"))
	})
	t.Run("asked for short contracts", func(t *testing.T) {
		// The session asks for 400 ms: its floor is 100 ms, and the
		// server that grants it keeps it renewed every 200 ms or so.
		const ttl = 400 * time.Millisecond
		url, renews := renewServer(t, ttl, func(time.Time) time.Time { return time.Now().Add(ttl) })
		dialChat(t, url, ws.WithConnectOptions(pigeon.WithContractTTL(ttl)))
		time.Sleep(window)
		n := renews.Load()
		t.Logf("%d renewals in %s", n, window)
		require.GreaterOrEqual(t, n, int64(3), "kept renewed")
		require.LessOrEqual(t, n, int64(15), "a quarter of the lifetime apart at least")
	})
}
