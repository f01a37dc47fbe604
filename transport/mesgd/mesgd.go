// Package mesgd serves mesgd's own WebSocket format on a Pigeon broker,
// so that a mesgd program connects unchanged (docs/protocol.md, "mesgd
// compatibility").
//
// A WebSocket upgrade on /mesgd/<route path> (for example
// /mesgd/kind=chat/room=lobby), with the subprotocol json and a bearer
// token (the Authorization header, or the pigeon.bearer.<token>
// subprotocol, a grant token included), subscribes the connection to the
// route path's selector on the configured subject: every message whose
// data matches is sent as one text frame holding its data. Every JSON
// object the client sends is published to that subject as a message's
// data, governed like any publish: under a contract negotiated for the
// connection's principal, through every gate. A refused frame is answered
// with an error frame, {"error":{"code","message","details"}}, and the
// connection stays up.
//
// # Concurrency
//
// A Server is safe for concurrent use. Each connection has one reader,
// which publishes the frames in order, and deliveries write to it as
// they come; Shutdown closes every connection with 1001 and waits for
// their goroutines.
package mesgd

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"pigeon"
	"pigeon/internal/wire"
	"pigeon/transport/ws"
)

// Subprotocol is the WebSocket subprotocol of mesgd's format.
const Subprotocol = "json"

// Prefix is the path the endpoint is served under.
const Prefix = "/mesgd"

// Defaults of Options.
const (
	DefaultType      = "mesgd.frame"
	DefaultMaxFrame  = 64 << 10
	writeTimeout     = 10 * time.Second
	defaultClassific = "internal"
)

// Options configure a Server. New copies them.
type Options struct {
	// Subject is the subject every connection publishes to and
	// subscribes on (required).
	Subject string
	// Intent, Type and Classification fill the envelope of a published
	// frame (defaults: the subject's first intent, DefaultType, the
	// subject's classification or "internal").
	Intent, Type, Classification string
	// Region is a connection's region when its upgrade names none (the
	// x-pigeon-region header or region query parameter); "" is the
	// engine's.
	Region string
	// MaxFrame bounds a frame the client sends (default DefaultMaxFrame).
	MaxFrame int64
	// OriginPatterns lists the origins browsers may connect from besides
	// the server's own host (see websocket.AcceptOptions).
	OriginPatterns []string
	// Logger receives connection events; never payload values.
	Logger *slog.Logger
}

// Server is the mesgd endpoint: an http.Handler for Prefix and below.
type Server struct {
	e    *pigeon.Engine
	opts Options

	mu      sync.Mutex
	conns   map[*websocket.Conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

// New returns the mesgd endpoint of e for opts.Subject.
func New(e *pigeon.Engine, opts Options) *Server {
	if opts.Type == "" {
		opts.Type = DefaultType
	}
	if opts.MaxFrame <= 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.OriginPatterns = append([]string(nil), opts.OriginPatterns...)
	return &Server{e: e, opts: opts, conns: map[*websocket.Conn]struct{}{}}
}

// Selector returns the selector of an endpoint path: /mesgd/kind=chat
// selects "/kind=chat", and /mesgd or /mesgd/ selects every message.
func Selector(path string) string {
	sel := strings.TrimPrefix(path, Prefix)
	if sel == "" || sel == "/" {
		return "/*"
	}
	return strings.TrimSuffix(sel, "/")
}

// ServeHTTP authenticates the upgrade, negotiates the connection's
// contract, upgrades and serves the connection until it ends. Refusals
// before the upgrade are answered with the JSON error body and the
// status of their code.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	sel := Selector(r.URL.Path)
	if _, err := pigeon.ParseSelector(sel); err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	// A page of another origin is refused before its credential is looked
	// at, as on /v1/ws (ws.CheckOrigin): it authenticates no one and counts
	// toward no lockout of the browser's address.
	if err := ws.CheckOrigin(r, s.opts.OriginPatterns); err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	p, region, err := ws.AuthenticateUpgrade(s.e, r, s.opts.Region)
	if err != nil {
		ws.WriteUpgradeError(w, err)
		return
	}
	k, err := s.e.Negotiate(ctx, p, region, []string{s.opts.Subject}, 0)
	if err != nil {
		wire.WriteHTTPError(w, err)
		return
	}
	caller := pigeon.Caller{Principal: p, Region: k.Info().Region, ContractID: k.ID()}
	defer func() { _ = s.e.RevokeContract(context.WithoutCancel(ctx), p, k.ID()) }()
	if !s.enter() {
		wire.WriteHTTPError(w, pigeon.NewError(pigeon.CodeShutdown, "the server is shutting down"))
		return
	}
	defer s.wg.Done()
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, OriginPatterns: s.opts.OriginPatterns})
	if err != nil {
		return
	}
	c.SetReadLimit(s.opts.MaxFrame)
	if !s.track(c) {
		_ = c.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer s.untrack(c)
	s.opts.Logger.Debug("mesgd connected", "principal", p.ID, "selector", sel, "remote", r.RemoteAddr)
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if k.Allows(s.opts.Subject, pigeon.OpReceive) {
		opts := []pigeon.SubscribeOption{pigeon.WithSelector(sel)}
		if sp, err := s.e.Subject(s.opts.Subject); err == nil && sp.Mode == pigeon.ModePubSub {
			opts = append(opts, pigeon.WithAtMostOnce()) // as mesgd: a frame missed while away is not kept
		}
		sub, err := s.e.Subscribe(cctx, caller, s.opts.Subject, func(ctx context.Context, d *pigeon.Delivery) error {
			wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
			defer wcancel()
			return c.Write(wctx, websocket.MessageText, d.Message.Data)
		}, opts...)
		if err != nil {
			_ = c.Close(websocket.StatusPolicyViolation, string(pigeon.ErrorCode(err)))
			return
		}
		defer func() { _ = sub.Unsubscribe(context.Background()) }()
		go func() {
			<-sub.Done()
			if err := sub.Err(); err != nil { // the contract ended: the client reconnects
				_ = c.Close(websocket.StatusPolicyViolation, string(pigeon.ErrorCode(err)))
			}
		}()
	}
	s.read(cctx, c, caller)
}

// read publishes every frame the client sends until the connection ends.
func (s *Server) read(ctx context.Context, c *websocket.Conn, caller pigeon.Caller) {
	intent, class := s.opts.Intent, s.opts.Classification
	if sp, err := s.e.Subject(s.opts.Subject); err == nil {
		if intent == "" && len(sp.Intents) > 0 {
			intent = sp.Intents[0]
		}
		if class == "" {
			class = sp.Data.Classification
		}
	}
	if class == "" {
		class = defaultClassific
	}
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText || len(b) == 0 || b[0] != '{' || !json.Valid(b) {
			s.refuse(ctx, c, pigeon.NewError(pigeon.CodeBadRequest, "a frame must be a JSON object"))
			continue
		}
		m := &pigeon.Message{Type: s.opts.Type, Subject: s.opts.Subject, Intent: intent, Classification: class, Data: b}
		if _, err := s.e.Publish(ctx, caller, m); err != nil {
			s.refuse(ctx, c, err)
		}
	}
}

// refuse answers a refused frame with an error frame.
func (s *Server) refuse(ctx context.Context, c *websocket.Conn, err error) {
	b, _ := json.Marshal(map[string]any{"error": wire.Encode(err)})
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_ = c.Write(wctx, websocket.MessageText, b)
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Server) track(c *websocket.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c *websocket.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.CloseNow()
}

// Shutdown closes every connection with 1001 and waits for them to end,
// or for ctx. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*websocket.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		go func() { _ = c.Close(websocket.StatusGoingAway, "server shutting down") }()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
