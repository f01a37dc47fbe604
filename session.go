package pigeon

import (
	"context"
	"sync/atomic"
	"time"
)

// Session is one client's connection to a broker, running under one
// negotiated contract. The in-process session and the WebSocket session
// implement it identically, so application code and tests do not change
// between the two. A Session is safe for concurrent use.
type Session interface {
	// Contract is the session's contract.
	Contract() Contract
	// Publish admits one message; see Engine.Publish.
	Publish(ctx context.Context, m *Message) (*Result, error)
	// Request publishes a request and blocks until its reply or ctx ends.
	Request(ctx context.Context, m *Message) (*Message, error)
	// Receive pulls up to max messages from subject.
	Receive(ctx context.Context, subject string, max int) ([]*Message, error)
	// Ack acknowledges a received message.
	Ack(ctx context.Context, subject, messageID string) error
	// Nack gives a leased message back for redelivery after delay (< 0:
	// the subject's backoff; above MaxRetryDelay: MaxRetryDelay).
	Nack(ctx context.Context, subject, messageID string, delay time.Duration) error
	// Replay returns retained messages again.
	Replay(ctx context.Context, r ReplayRequest) ([]*Message, error)
	// Subscribe starts push delivery of subject to h.
	Subscribe(ctx context.Context, subject string, h Handler, opts ...SubscribeOption) (Subscription, error)
	// Close ends the session and its subscriptions. It is idempotent.
	Close(ctx context.Context) error
}

// SequenceSettler is the ability of a Session to ack and nack a received
// message by its id and its sequence (Message.Sequence), as
// Engine.AckSequence and Engine.NackSequence do: a late answer to a
// message retention trimmed never settles a newer message published under
// its id. The in-process and WebSocket sessions have it; find it with a
// type assertion.
type SequenceSettler interface {
	AckSequence(ctx context.Context, subject, messageID string, seq uint64) error
	NackSequence(ctx context.Context, subject, messageID string, seq uint64, delay time.Duration) error
}

// AttemptSettler is the ability of a Session to bind a pull answer to the
// lease it answers, as Engine.ReceiveAttempts, Engine.AckAttempt and
// Engine.NackAttempt do: ReceiveAttempts returns, in step with the
// messages, each one's lease attempt, and an answer naming it settles
// nothing (ACK_NOT_ALLOWED) once the lease ran out and the message was
// leased again, even to another session of the same principal. An
// attempt of 0 names none (AckSequence, NackSequence). The in-process and
// WebSocket sessions have it; find it with a type assertion.
type AttemptSettler interface {
	ReceiveAttempts(ctx context.Context, subject string, max int) ([]*Message, []int, error)
	AckAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int) error
	NackAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int, delay time.Duration) error
}

// DepthPublisher is the ability of a Session to publish a message at a
// depth (Message.Hops, Caller.Hops) other than 0: hops is written into
// the message the broker admits, in place of the 0 a client's publish
// gets, as a program's emit is written one deeper than its input. A
// bridge carrying a message back in from another system (bridge/nats)
// publishes it one deeper than the envelope it carried said, so that a
// loop through bridges and programs ends at their bound. PublishAt with
// hops 0 is Publish.
//
// The in-process session has it, and so does the WebSocket session; the
// broker takes a WebSocket client's depth only from a principal holding
// RoleBridge (Engine.MayPublishAtDepth) and refuses the publish of any
// other with FORBIDDEN. Find it with a type assertion.
type DepthPublisher interface {
	PublishAt(ctx context.Context, m *Message, hops uint32) (*Result, error)
}

// RoleBridge is the role of a principal the broker lets publish at a
// depth over a transport (DepthPublisher): a bridge's. A client without
// it publishes at 0 whatever it asks, so that it cannot pass a message as
// a program's output, nor restart a loop's count. Like RoleAdmin it is
// given to an account (Engine.PutAccount) or a static token; no principal
// holds it by default.
const RoleBridge = "bridge"

// MayPublishAtDepth reports whether p may publish at a depth over a
// transport: whether it holds RoleBridge as its credential and account
// stand now, not as they stood when it authenticated (a role taken from
// its account since counts no more; a grant revoked since gives none).
// The transports ask it at each publish that carries a depth; an
// embedder's own Caller is trusted with its Hops, as with the rest.
func (e *Engine) MayPublishAtDepth(p *Principal) bool {
	if p == nil {
		return false
	}
	q, err := e.currentPrincipal(p, e.now())
	return err == nil && q.HasRole(RoleBridge)
}

// Dialer opens sessions to a broker. transport/inproc dials an *Engine in
// process and transport/ws one over WebSocket; each is configured with its
// ConnectOptions when it is built.
type Dialer interface {
	// Dial authenticates credential and negotiates a contract for
	// subjects, as Broker.Connect does.
	Dial(ctx context.Context, credential string, subjects []string) (Session, error)
}

// ConnectOption configures Connect, or a transport's dial.
type ConnectOption func(*ConnectOptions)

// ConnectOptions are the resolved options of a connection; a transport
// applies the caller's ConnectOption values to a zero ConnectOptions and
// carries the result over the wire.
type ConnectOptions struct {
	// Region is the session's region ("": the broker's Options.Region).
	Region string
	// ContractTTL is the contract lifetime asked for (0: the default).
	ContractTTL time.Duration
	// NoAutoRenew stops the session from renewing its contract by
	// itself (WithoutAutoRenew).
	NoAutoRenew bool
}

// WithRegion sets the session's region.
func WithRegion(region string) ConnectOption { return func(o *ConnectOptions) { o.Region = region } }

// WithContractTTL asks for a contract lifetime: 0 means the default; a
// negative one or one above Options.MaxContractTTL makes Connect fail with
// INVALID_ARGUMENT.
func WithContractTTL(d time.Duration) ConnectOption {
	return func(o *ConnectOptions) { o.ContractTTL = d }
}

// WithoutAutoRenew stops a session from renewing its contract by itself:
// it then ends at the contract's expiry. By default a session, in process
// or over WebSocket, renews its contract (Engine.RenewContract) shortly
// before it expires (RenewLead), as far as its credential allows, so that
// a long-lived session and its subscriptions go on.
func WithoutAutoRenew() ConnectOption {
	return func(o *ConnectOptions) { o.NoAutoRenew = true }
}

// RenewLead is how long before a contract's expiry a session renews it,
// for left of remaining life: a tenth of it, but at least 5 s (half of it
// for less than 10 s), so that a short contract leaves room for a slow
// answer. The in-process session and the clients renew on this schedule.
func RenewLead(left time.Duration) time.Duration {
	return max(left/10, min(left/2, 5*time.Second))
}

// RenewDelay is how long a session with left of its contract's life waits
// before it renews: until RenewLead(left) is left, or, when retry is set
// (a failure that may pass), retry, but never past the expiry.
func RenewDelay(left, retry time.Duration) time.Duration {
	if retry > 0 {
		return min(retry, left)
	}
	return left - RenewLead(left)
}

// RenewRetry is how long a session waits before it tries again a renewal
// that failed for a reason that may pass, for left of remaining life: a
// quarter of it, at most 5 s and at least 100 ms.
func RenewRetry(left time.Duration) time.Duration {
	return max(min(left/4, 5*time.Second), 100*time.Millisecond)
}

// RenewalFinal reports whether err, a refused renewal, will be refused
// again whenever it is tried: the contract was revoked, has expired, is
// unknown or another principal's, the policy it was compiled from
// changed, a role or grant it relied on was taken away, or the caller's
// credential has expired. A session stops renewing such a contract, where
// it tries another failure again (RATE_LIMITED, a store failure, a lost
// connection): each try is audited and counts toward the negotiation
// rate. The TypeScript, Python and Rust clients stop on the same codes.
func RenewalFinal(err error) bool {
	switch ErrorCode(err) {
	case CodeContractRevoked, CodeContractExpired, CodeContractNotFound, CodeContractPrincipalMismatch,
		CodeContractStale, CodeGrantRevoked, CodeUnauthenticated:
		return true
	}
	return false
}

// localSession is the in-process Session.
type localSession struct {
	e      *Engine
	caller Caller
	c      *contract
	closed atomic.Bool
	done   chan struct{} // closed by Close
	subs   sessionSubs
}

var _ Session = (*localSession)(nil)
var _ SequenceSettler = (*localSession)(nil)
var _ AttemptSettler = (*localSession)(nil)
var _ DepthPublisher = (*localSession)(nil)

func (e *Engine) newLocalSession(c Caller, k *contract) *localSession {
	return &localSession{e: e, caller: c, c: k, done: make(chan struct{})}
}

// renewLoop renews s's contract for ttl shortly before it expires
// (RenewDelay), until the session closes, the engine shuts down or the
// contract can be renewed no further (its credential's end, a refusal
// RenewalFinal names). After another failure it tries again (RenewRetry)
// until the contract expires.
func (s *localSession) renewLoop(ttl time.Duration) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var retry time.Duration
	for {
		exp := s.c.expiresAt()
		left := exp.Sub(s.e.now())
		if left <= 0 {
			return
		}
		t.Reset(RenewDelay(left, retry))
		retry = 0
		select {
		case <-s.done:
			return
		case <-s.e.ctx.Done():
			return
		case <-t.C:
		}
		if !s.c.expiresAt().Equal(exp) {
			continue // renewed meanwhile
		}
		ctx, cancel := context.WithTimeout(s.e.ctx, 10*time.Second)
		var k Contract
		// A panic of the renewal (of the store, which the application
		// may supply) is a failed renewal: tried again (RenewRetry).
		err := s.e.caught("renewing a session's contract", func() (err error) {
			k, err = s.e.RenewContract(ctx, s.caller.Principal, s.c.info.ID, ttl)
			return err
		})
		cancel()
		switch {
		case err == nil && !k.ExpiresAt().After(exp):
			return // as far as the credential goes
		case err == nil:
		case RenewalFinal(err) || ErrorCode(err) == CodeShutdown:
			return // no renewal will succeed
		default:
			s.e.opts.Logger.Warn("pigeon: renewing a session's contract failed; trying again", "contract", s.c.info.ID, "err", err)
			retry = RenewRetry(exp.Sub(s.e.now()))
		}
	}
}

// Caller returns who the session acts as.
func (s *localSession) Caller() Caller { return s.caller }

func (s *localSession) Contract() Contract { return s.c }

func (s *localSession) check() error {
	if s.closed.Load() {
		return NewError(CodeSessionClosed, "session is closed")
	}
	return nil
}

func (s *localSession) Publish(ctx context.Context, m *Message) (*Result, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.e.Publish(ctx, s.caller, m)
}

// PublishAt publishes m at depth hops (DepthPublisher). The in-process
// session acts for its embedder, who chose to open it: its depth is
// taken without a role, as an embedder's Caller is.
func (s *localSession) PublishAt(ctx context.Context, m *Message, hops uint32) (*Result, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	c := s.caller
	c.Hops = hops
	return s.e.Publish(ctx, c, m)
}

func (s *localSession) Request(ctx context.Context, m *Message) (*Message, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.e.Request(ctx, s.caller, m)
}

func (s *localSession) Receive(ctx context.Context, subject string, max int) ([]*Message, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.e.Receive(ctx, s.caller, subject, max)
}

func (s *localSession) Ack(ctx context.Context, subject, messageID string) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.Ack(ctx, s.caller, subject, messageID)
}

func (s *localSession) Nack(ctx context.Context, subject, messageID string, delay time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.Nack(ctx, s.caller, subject, messageID, sessionDelay(delay))
}

// sessionDelay is the delay a session's nack asks the engine for: one
// above MaxRetryDelay waits MaxRetryDelay, as a push handler's RetryAfter
// does and the WebSocket session's and the other clients' nacks do, rather
// than being refused with CodeInvalidArgument as Engine.Nack refuses it.
func sessionDelay(d time.Duration) time.Duration { return min(d, MaxRetryDelay) }

func (s *localSession) AckSequence(ctx context.Context, subject, messageID string, seq uint64) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.AckSequence(ctx, s.caller, subject, messageID, seq)
}

func (s *localSession) NackSequence(ctx context.Context, subject, messageID string, seq uint64, delay time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.NackSequence(ctx, s.caller, subject, messageID, seq, sessionDelay(delay))
}

func (s *localSession) ReceiveAttempts(ctx context.Context, subject string, max int) ([]*Message, []int, error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	return s.e.ReceiveAttempts(ctx, s.caller, subject, max)
}

func (s *localSession) AckAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.AckAttempt(ctx, s.caller, subject, messageID, seq, attempt)
}

func (s *localSession) NackAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int, delay time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.e.NackAttempt(ctx, s.caller, subject, messageID, seq, attempt, sessionDelay(delay))
}

func (s *localSession) Replay(ctx context.Context, r ReplayRequest) ([]*Message, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.e.Replay(ctx, s.caller, r)
}

func (s *localSession) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.subs.closeAll()
	return nil
}
