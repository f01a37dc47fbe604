// Package logctx carries the id of one request (or WebSocket connection)
// in a context and puts it on every log line written with that context:
// Handler wraps a slog.Handler, and a line logged with a context that
// holds an id gets the attribute request_id.
package logctx

import (
	"context"
	"log/slog"
)

// Key is the attribute name of the id on a log line.
const Key = "request_id"

type ctxKey struct{}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// ID returns the id ctx carries, or "".
func ID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Handler returns h adding the context's id to every record. Wrapping a
// handler that already adds it returns it unchanged.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(handler); ok {
		return h
	}
	return handler{h}
}

type handler struct{ slog.Handler }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	if id := ID(ctx); id != "" {
		r.AddAttrs(slog.String(Key, id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{h.Handler.WithAttrs(as)} }

func (h handler) WithGroup(name string) slog.Handler { return handler{h.Handler.WithGroup(name)} }
