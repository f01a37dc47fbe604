package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"

	"pigeon"
)

// answerWriter is the http.ResponseWriter every request is served
// through. It records the answer's status and size, for the request's log
// line, and what survive needs to know of a handler that panicked:
// whether its answer has started, and the connection it hijacked, if it
// did. Unwrap lets http.ResponseController reach the connection's other
// abilities (its deadlines).
type answerWriter struct {
	http.ResponseWriter
	status int      // the status written; 0 until one is
	n      int64    // the bytes of body written
	conn   net.Conn // the connection, once hijacked
}

func (w *answerWriter) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code) // an invalid code panics, and writes nothing
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code // an informational status (103) leaves the answer to come
	}
}

func (w *answerWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

// FlushError flushes what is written, the status and headers at least:
// the answer has started.
func (w *answerWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for a handler that asks for an http.Flusher.
func (w *answerWriter) Flush() { _ = w.FlushError() }

// Hijack takes the connection over (a WebSocket upgrade), and records it.
func (w *answerWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.conn = conn
	}
	return conn, brw, err
}

func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusCode is the answer's status; 101 for a WebSocket upgrade, which
// writes through the hijacked connection.
func (w *answerWriter) statusCode() int {
	if w.status == 0 {
		return http.StatusSwitchingProtocols
	}
	return w.status
}

// bareWriter is the http.ResponseWriter under w's answerWriter: the one
// http.MaxBytesReader tells that the request's body was too large, so that
// net/http closes the connection rather than read the rest of it.
func bareWriter(w http.ResponseWriter) http.ResponseWriter {
	if aw, ok := w.(*answerWriter); ok {
		return aw.ResponseWriter
	}
	return w
}

// survive turns p, the panic of a handler serving r through w (an
// engine call's under a route, a custom store's, a mounted handler's),
// into what the client can still be told. The panic is logged with its
// stack, method and route pattern (never the path, which the client
// chose), its value with card numbers redacted: net/http, reached, logged
// the value whole and cut the connection. Then:
//
//   - an answer not started is answered 500 INTERNAL with the usual error
//     body, and the connection serves the next request;
//   - an answer started (a stream's status and first events written) can
//     only be cut: survive returns true, and the caller panics with
//     http.ErrAbortHandler, which net/http cuts quietly;
//   - a hijacked connection (a WebSocket's) is the handler's, and nothing
//     is written on it: it is closed, which net/http never does, so that it
//     is not held open with nothing left to serve it.
//
// A panic with http.ErrAbortHandler is a handler's own abort (as
// httputil.ReverseProxy's), not a fault: it is not logged, and is passed
// on. survive never panics with p.
func (s *Server) survive(w *answerWriter, r *http.Request, p any) (abort bool) {
	if p != http.ErrAbortHandler {
		s.opts.Logger.ErrorContext(r.Context(), "an HTTP handler panicked: answered INTERNAL if its answer had not started, else cut",
			"method", r.Method, "route", r.Pattern, "panic", pigeon.RedactPANs(fmt.Sprint(p)), "stack", string(debug.Stack()))
	}
	switch {
	case w.conn != nil:
		_ = w.conn.Close()
		return false
	case w.status != 0 || p == http.ErrAbortHandler:
		return true
	}
	// What the handler set for its own answer is not the error's.
	h := w.Header()
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Range", "Content-Disposition",
		"Transfer-Encoding", "Trailer", "Etag", "Last-Modified", "Location", "Set-Cookie"} {
		delete(h, k)
	}
	writeError(w, pigeon.NewError(pigeon.CodeInternal, "the server failed on this request"))
	return false
}
