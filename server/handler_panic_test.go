package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testlog"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/memory"
)

// panicPAN is the card number a panic's value quotes: a log line that
// keeps the value whole hands it to whoever reads the logs.
const panicPAN = "4111111111111111"

// panickyStore is a memory store whose next call of the method armed
// names panics, quoting a card number, as a third party's store with a
// bug may.
type panickyStore struct {
	store.Store
	armed atomic.Pointer[string]
}

func (s *panickyStore) arm(method string) { s.armed.Store(&method) }

// fire panics when method is the one armed, once.
func (s *panickyStore) fire(method string) {
	if m := s.armed.Load(); m != nil && *m == method && s.armed.CompareAndSwap(m, nil) {
		panic("the store choked on card " + panicPAN)
	}
}

func (s *panickyStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	s.fire("Append")
	return s.Store.Append(ctx, m)
}

func (s *panickyStore) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	s.fire("ReadAudit")
	return s.Store.ReadAudit(ctx, from, limit)
}

// panicServer is a server on a panicky store, served by Serve on
// 127.0.0.1, whose logger (net/http's error log included: Serve sends it
// there, at debug) writes every level to logs.
type panicServer struct {
	s    *server.Server
	st   *panickyStore
	logs *testlog.Buffer
	url  string
}

func newPanicServer(t *testing.T) *panicServer {
	t.Helper()
	st := &panickyStore{Store: memory.New(nil)}
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Store:         st,
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       testCatalog(),
		Region:        "uk",
	})
	require.NoError(t, err)
	logs := &testlog.Buffer{}
	s := server.New(e, &server.Options{Logger: logs.Logger()})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		require.ErrorIs(t, <-served, http.ErrServerClosed)
		require.NoError(t, e.Shutdown(ctx))
	})
	url := "http://" + l.Addr().String()
	return &panicServer{s: s, st: st, logs: logs, url: url}
}

// do sends one request to the server (as fixture.do).
func (ps *panicServer) do(t *testing.T, method, path, token, body string, headers ...string) response {
	t.Helper()
	return doRequest(t, method, ps.url+path, token, body, headers...)
}

// contract negotiates over HTTP and returns the contract id.
func (ps *panicServer) contract(t *testing.T, token string, subjects ...string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"subjects": subjects})
	require.NoError(t, err)
	r := ps.do(t, http.MethodPost, "/v1/contracts", token, string(b))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	return r.json(t)["contract"].(map[string]any)["id"].(string)
}

// requirePanicLogged checks that the panic of route was logged with its
// stack and the card number redacted, and that no line (net/http's error
// log included) quotes the card number.
func (ps *panicServer) requirePanicLogged(t *testing.T, route string) {
	t.Helper()
	logs := ps.logs.String()
	require.Contains(t, logs, "an HTTP handler panicked")
	require.Contains(t, logs, "route="+route)
	require.Contains(t, logs, "[REDACTED]", "the panic's value is logged, redacted")
	require.Contains(t, logs, "runtime/debug.Stack", "the stack is logged")
	require.NotContains(t, logs, panicPAN, "no log line quotes the card number")
	require.NotContains(t, logs, "http: panic serving", "net/http never sees the panic's value")
}

// TestHandlerPanicAnsweredInternal: a handler that panics before its
// answer starts (a custom store panicking under a publish or a read of
// the audit log, an application handler mounted on the server) is
// answered 500 with the usual error body, code INTERNAL, rather than a
// cut connection; the panic is logged with its stack, card numbers
// redacted, and the server answers the next request as before.
func TestHandlerPanicAnsweredInternal(t *testing.T) {
	var orders atomic.Int64
	cases := []struct {
		name  string
		route string
		arm   func(ps *panicServer)
		send  func(t *testing.T, ps *panicServer) response
	}{
		{
			name: "store panics under a publish", route: "/v1/messages",
			arm: func(ps *panicServer) { ps.st.arm("Append") },
			send: func(t *testing.T, ps *panicServer) response {
				id := ps.contract(t, "checkout-token", "payments.authorize")
				return ps.do(t, http.MethodPost, "/v1/messages", "checkout-token",
					msgBody(t, demo.Payment(fmt.Sprintf("o-panic-%d", orders.Add(1)))),
					"x-pigeon-contract", id)
			},
		},
		{
			name: "store panics under a read of the audit log", route: "/v1/audit",
			arm: func(ps *panicServer) { ps.st.arm("ReadAudit") },
			send: func(t *testing.T, ps *panicServer) response {
				return ps.do(t, http.MethodGet, "/v1/audit?max=1", "auditor-token", "")
			},
		},
		{
			name: "mounted handler panics", route: "/app/",
			arm: func(*panicServer) {},
			send: func(t *testing.T, ps *panicServer) response {
				return ps.do(t, http.MethodGet, "/app/orders", "checkout-token", "")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := newPanicServer(t)
			var mounted atomic.Bool
			require.NoError(t, ps.s.Mount("/app/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if mounted.CompareAndSwap(false, true) {
					w.Header().Set("Content-Length", "3") // the error body is not 3 bytes
					panic(errors.New("the app choked on card " + panicPAN))
				}
				_, _ = io.WriteString(w, "ok\n")
			})))

			tc.arm(ps)
			r := tc.send(t, ps)
			require.Equal(t, http.StatusInternalServerError, r.status, "%s", r.body)
			require.Equal(t, pigeon.CodeInternal, r.code(t))
			require.Equal(t, "application/json", r.header.Get("Content-Type"))
			require.NotContains(t, string(r.body), panicPAN)
			ps.requirePanicLogged(t, tc.route)
			require.Contains(t, ps.logs.String(), "status=500", "the request's log line has the answer's status")

			again := tc.send(t, ps)
			require.Less(t, again.status, 300, "the next request is served: %s", again.body)
		})
	}
}

// TestHandlerPanicAfterAnswerStartedAborts: a handler that panics once
// its answer has started (a stream, whose status and first bytes are
// written) cannot be answered INTERNAL: the answer is cut, as net/http
// cuts it, but quietly (http.ErrAbortHandler), so that net/http never
// logs the panic's value; the server logs it, redacted.
func TestHandlerPanicAfterAnswerStartedAborts(t *testing.T) {
	ps := newPanicServer(t)
	require.NoError(t, ps.s.Mount("/stream/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: hello\n\n")
		_ = http.NewResponseController(w).Flush()
		panic("the stream choked on card " + panicPAN)
	})))

	req, err := http.NewRequest(http.MethodGet, ps.url+"/stream/x", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer checkout-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the stream is cut, not ended: %q", b)
	require.Equal(t, "event: hello\n\n", string(b), "nothing is written after the stream's own bytes")
	ps.requirePanicLogged(t, "/stream/")
	require.NotContains(t, ps.logs.String(), "superfluous", "no status is written over the stream's")
}

// TestHandlerPanicAfterHijackClosesConnection: a handler that panics
// after it hijacked the connection (as a WebSocket upgrade does) is
// answered nothing, its connection being its own, but the connection is
// closed: net/http leaves a hijacked connection alone, and it was held
// open, with nothing to serve it, until the client went.
func TestHandlerPanicAfterHijackClosesConnection(t *testing.T) {
	ps := newPanicServer(t)
	require.NoError(t, ps.s.Mount("/raw/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if _, _, err := http.NewResponseController(w).Hijack(); err != nil {
			panic(err) // the client then sees no empty, closed connection
		}
		panic("the raw handler choked on card " + panicPAN)
	})))

	conn, err := net.Dial("tcp", strings.TrimPrefix(ps.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /raw/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer checkout-token\r\n\r\n")
	require.NoError(t, err)
	// The deadline only bounds a failure: the connection ends at once.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	b, err := io.ReadAll(bufio.NewReader(conn))
	require.NoError(t, err, "the connection is closed, not held open")
	require.Empty(t, b, "nothing is written on a hijacked connection")
	ps.requirePanicLogged(t, "/raw/")
	require.NotContains(t, ps.logs.String(), "hijacked connection", "no answer is tried on it")
}

// TestHandlerAbortStaysAnAbort: a handler's own abort (a panic with
// http.ErrAbortHandler, as httputil.ReverseProxy's when its copy fails)
// is not a fault: the answer is cut, as net/http cuts it, and no error
// is logged.
func TestHandlerAbortStaysAnAbort(t *testing.T) {
	ps := newPanicServer(t)
	require.NoError(t, ps.s.Mount("/abort/", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})))
	req, err := http.NewRequest(http.MethodGet, ps.url+"/abort/x", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer checkout-token")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "the answer is cut")
	require.NotContains(t, ps.logs.String(), "an HTTP handler panicked")
	require.NotContains(t, ps.logs.String(), "level=ERROR")
}
