// Package inproc is the in-process transport: sessions that call the
// engine directly, with no network and no encoding. It is what embedded
// applications and tests use; transport/ws offers the same pigeon.Session
// over WebSocket.
package inproc

import (
	"context"

	"pigeon"
)

// Dialer connects to an engine in process.
type Dialer struct {
	Engine *pigeon.Engine
	Opts   []pigeon.ConnectOption
}

var _ pigeon.Dialer = Dialer{}

// Dial authenticates credential and negotiates subjects, returning a session.
func (d Dialer) Dial(ctx context.Context, credential string, subjects []string) (pigeon.Session, error) {
	return d.Engine.Connect(ctx, credential, subjects, d.Opts...)
}
