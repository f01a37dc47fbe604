package pigeon

import (
	"context"
	"sync"
)

// Handler handles one pushed delivery. Returning nil acknowledges it;
// returning an error (or panicking) gives it back for redelivery.
type Handler func(ctx context.Context, d *Delivery) error

// Delivery is one pushed message.
type Delivery struct {
	Subject string
	Message *Message
	Attempt int
}

// Subscription is a running push subscription.
type Subscription interface {
	// ID identifies the subscription within its session.
	ID() string
	// Unsubscribe stops deliveries; in-flight handlers finish first. It is
	// idempotent.
	Unsubscribe(ctx context.Context) error
	// Done is closed when the subscription has stopped, for any reason.
	Done() <-chan struct{}
	// Err says why a stopped subscription stopped (nil after Unsubscribe).
	Err() error
}

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeOptions)

type subscribeOptions struct{}

// subscriptions is the engine's table of running subscriptions.
type subscriptions struct {
	mu sync.Mutex
}

func (t *subscriptions) init()     {}
func (t *subscriptions) closeAll() {}

// sessionSubs tracks one session's subscriptions.
type sessionSubs struct{}

func (s *sessionSubs) closeAll() {}

// notify wakes deliveries of subject after seq was appended.
func (e *Engine) notify(subject string, seq uint64) {}

// onContractRevoked stops subscriptions running under a revoked contract.
func (e *Engine) onContractRevoked(id string) {}

func (s *localSession) Subscribe(ctx context.Context, subject string, h Handler, opts ...SubscribeOption) (Subscription, error) {
	return nil, NewError(CodeBadRequest, "push subscriptions are not available yet")
}
