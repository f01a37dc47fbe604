package pigeon

import "context"

// Handle binds an in-process handler to a subject (and, with WithSelector,
// to a content route) under the principal credential authenticates to and
// a contract negotiated for that subject. The handler runs in the same
// governed flow as any networked subscriber: deliveries are re-checked
// against the contract, and what it publishes through Delivery.Session
// passes every gate. Middleware (WithMiddleware) wraps it. The returned
// subscription ends, and its session closes, on Unsubscribe or Shutdown.
func (e *Engine) Handle(ctx context.Context, credential, subject string, h Handler, opts ...SubscribeOption) (Subscription, error) {
	return e.HandleAs(ctx, credential, []string{subject}, subject, h, opts...)
}

// HandleAs is Handle with a contract negotiated for more subjects than the
// one handled, so the handler can publish follow-up messages elsewhere.
func (e *Engine) HandleAs(ctx context.Context, credential string, contractSubjects []string, subject string, h Handler, opts ...SubscribeOption) (Subscription, error) {
	if !e.ops.enter() { // Shutdown waits for the session's closer to start (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	sess, err := e.Connect(ctx, credential, contractSubjects)
	if err != nil {
		return nil, err
	}
	sub, err := sess.Subscribe(ctx, subject, h, opts...)
	if err != nil {
		_ = sess.Close(ctx)
		return nil, err
	}
	e.goTracked(func() {
		<-sub.Done()
		_ = sess.Close(context.Background())
	})
	return sub, nil
}
