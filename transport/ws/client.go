package ws

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"pigeon"
	"pigeon/internal/jsontext"
)

// Option configures Dial.
type Option func(*dialOptions)

type dialOptions struct {
	connect         pigeon.ConnectOptions
	client          *http.Client
	tls             *tls.Config // WithTLS
	header          http.Header
	subprotocolAuth bool
	maxFrame        int64
	writeQueue      int
	settleTimeout   time.Duration
	writeTimeout    time.Duration
	logger          *slog.Logger
	maxPending      int
	pingInterval    time.Duration // 0: no keepalive
	pingTimeout     time.Duration
}

// WithConnectOptions applies pigeon's connect options (pigeon.WithRegion,
// pigeon.WithContractTTL) to the sessions dialed: the region travels as the
// upgrade's x-pigeon-region (or ?region=), the lifetime in the negotiation.
func WithConnectOptions(opts ...pigeon.ConnectOption) Option {
	return func(o *dialOptions) {
		for _, fn := range opts {
			fn(&o.connect)
		}
	}
}

// WithHTTPClient dials with c.
func WithHTTPClient(c *http.Client) Option { return func(o *dialOptions) { o.client = c } }

// WithHeader adds headers to the upgrade request (copied).
func WithHeader(h http.Header) Option { return func(o *dialOptions) { o.header = h.Clone() } }

// WithSubprotocolAuth sends the credential as the pigeon.bearer.<token>
// subprotocol and the region as ?region=, as a browser must, instead of
// the Authorization and x-pigeon-region headers.
func WithSubprotocolAuth() Option { return func(o *dialOptions) { o.subprotocolAuth = true } }

// WithMaxFrame bounds the frames the client accepts (default 256 MiB: a
// replay answer carries up to the broker's MaxReplay messages and
// MaxReadBytes of them, plus one message).
func WithMaxFrame(n int64) Option { return func(o *dialOptions) { o.maxFrame = n } }

// DefaultWriteTimeout is how long one write of the client may make no
// progress before the connection is closed (WithWriteTimeout).
const DefaultWriteTimeout = 30 * time.Second

// WithWriteTimeout bounds how long one write of a frame may make no
// progress (a server that stopped reading, a network that dropped the
// connection without a word) before the connection is closed, failing
// its calls SESSION_CLOSED; a caller writing its own frame, whose context
// a write cannot honour without closing the connection, waits at most
// that long past its deadline. Default DefaultWriteTimeout; d <= 0 means
// the default.
func WithWriteTimeout(d time.Duration) Option { return func(o *dialOptions) { o.writeTimeout = d } }

// Defaults of the client's keepalive (WithPingInterval, WithPingTimeout),
// as the TypeScript client's pingIntervalMs and pingTimeoutMs.
const (
	DefaultClientPingInterval = 15 * time.Second
	DefaultClientPingTimeout  = 10 * time.Second
)

// WithPingInterval sets how long a connection may go without reading a
// frame from the server before the client pings it (a WebSocket ping
// control frame, which the server, as every WebSocket library, answers by
// itself): default DefaultClientPingInterval; d <= 0 disables the
// keepalive. A connection that reads frames more often than that never
// pings. Without it, a connection the server dropped without a word (the
// host vanished, a NAT forgot it: a half-open TCP connection) goes
// unnoticed: subscriptions stop receiving and a call whose context has no
// deadline waits for ever.
func WithPingInterval(d time.Duration) Option {
	return func(o *dialOptions) { o.pingInterval = max(d, 0) }
}

// WithPingTimeout sets how long the client waits for the answer to its
// ping (WithPingInterval) before it ends the connection: its calls fail
// with SESSION_CLOSED, Done is closed and Reconnect dials again, as after
// any lost connection; the end is logged once (WithLogger). Default
// DefaultClientPingTimeout; d <= 0 means the default.
func WithPingTimeout(d time.Duration) Option {
	return func(o *dialOptions) { o.pingTimeout = d }
}

// WithLogger receives the client's operational events. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *dialOptions) { o.logger = l } }

// Session is a pigeon.Session over WebSocket. It behaves as the
// in-process session does: the same operations, the same typed errors with
// the same codes, handlers that ack by returning nil. It is safe for
// concurrent use.
//
// A Session holds one connection at a time. When the connection is lost,
// calls fail with SESSION_CLOSED (SHUTTING_DOWN when the server is going
// away) and Done is closed; Reconnect dials again, negotiates a fresh
// contract for the same subjects and resumes every subscription on it.
type Session struct {
	url      string
	cred     string
	subjects []string
	o        dialOptions

	// reconn holds one token, taken by the Reconnect running and by
	// Close's teardown: it orders them, and a caller waiting for it gives
	// up when its context ends.
	reconn    chan struct{}
	mu        sync.Mutex
	cc        *clientConn
	contract  pigeon.Contract
	lifetime  time.Duration // what the last negotiation granted, measured from when it was asked
	closed    bool
	subs      map[*clientSub]struct{}
	bySID     map[string]*clientSub
	bg        sync.WaitGroup
	pubSlots  chan struct{}      // one per publish in flight (WithMaxPendingPublishes)
	life      context.Context    // ends with Close: the renewal loop and a Reconnect in flight end
	endLife   context.CancelFunc // ends life
	closeDone chan struct{}      // closed once the first Close's teardown has finished
}

var (
	_ pigeon.Session         = (*Session)(nil)
	_ pigeon.SequenceSettler = (*Session)(nil)
)

// Dial connects to the WebSocket endpoint at url (ws://, wss://, http:// or
// https://; a URL without a path gets /v1/ws), authenticates credential and
// negotiates a contract for subjects, as Engine.Connect does in process.
// A refusal is the same *pigeon.Error: UNAUTHENTICATED for an unknown
// credential, NO_PERMITTED_SUBJECTS, SUBJECT_NOT_FOUND, …
func Dial(ctx context.Context, url, credential string, subjects []string, opts ...Option) (*Session, error) {
	o := dialOptions{maxFrame: 256 << 20, writeQueue: 256, settleTimeout: 30 * time.Second, pingInterval: DefaultClientPingInterval}
	for _, fn := range opts {
		fn(&o)
	}
	if o.pingTimeout <= 0 {
		o.pingTimeout = DefaultClientPingTimeout
	}
	if o.writeTimeout <= 0 {
		o.writeTimeout = DefaultWriteTimeout
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.maxPending < 1 {
		o.maxPending = DefaultMaxPendingPublishes
	}
	s := &Session{url: url, cred: credential, subjects: append([]string(nil), subjects...), o: o,
		subs: map[*clientSub]struct{}{}, bySID: map[string]*clientSub{}, pubSlots: make(chan struct{}, o.maxPending),
		reconn: make(chan struct{}, 1), closeDone: make(chan struct{})}
	cc, k, lifetime, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.cc, s.contract, s.lifetime = cc, k, lifetime
	if !o.connect.NoAutoRenew {
		s.goBG(s.renewLoop)
	}
	return s, nil
}

// Dialer dials WebSocket sessions with fixed options; it is a
// pigeon.Dialer, as the in-process dialer is.
type Dialer struct {
	URL     string
	Options []Option
}

var _ pigeon.Dialer = Dialer{}

// Dial connects a session; see the package function Dial.
func (d Dialer) Dial(ctx context.Context, credential string, subjects []string) (pigeon.Session, error) {
	s, err := Dial(ctx, d.URL, credential, subjects, d.Options...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// connect dials a connection and negotiates on it; lifetime is how long
// the contract was granted for, from when it was asked.
func (s *Session) connect(ctx context.Context) (cc *clientConn, k pigeon.Contract, lifetime time.Duration, err error) {
	cc, err = s.dialConn(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	asked := time.Now()
	f, err := cc.call(ctx, jsonFrame(Frame{Op: OpNegotiate, Subjects: s.subjects, TTLMs: s.o.connect.ContractTTL.Milliseconds()}), nil)
	if err != nil {
		cc.close(ctx)
		return nil, nil, 0, err
	}
	var info pigeon.ContractInfo
	if err := json.Unmarshal(f.Contract, &info); err != nil {
		cc.close(ctx)
		return nil, nil, 0, pigeon.WrapError(pigeon.CodeInternal, err, "undecodable contract from server")
	}
	cc.pq.fitFrame(f.MaxFrame)
	k = info.View()
	return cc, k, k.ExpiresAt().Sub(asked), nil
}

// errSessionClosed is what calls on a closed session return.
func errSessionClosed() error {
	return pigeon.NewError(pigeon.CodeSessionClosed, "the session is closed")
}

// fromHandler reports whether ctx is the context of a handler of one of
// the session's subscriptions: a call made with it must wait for no
// handler (nor for a Close, which waits for the handlers), or two
// handlers, or a handler and Close, could wait for each other.
func (s *Session) fromHandler(ctx context.Context) bool {
	cs, _ := ctx.Value(handlerOf{}).(*clientSub)
	return cs != nil && cs.s == s
}

// conn returns the current connection.
func (s *Session) conn() (*clientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errSessionClosed()
	}
	return s.cc, nil
}

func (s *Session) call(ctx context.Context, build func(b []byte, id string) []byte, hook func(*Frame)) (*Frame, error) {
	cc, err := s.conn()
	if err != nil {
		return nil, err
	}
	return cc.call(ctx, build, hook)
}

// Contract returns the contract negotiated last.
func (s *Session) Contract() pigeon.Contract {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contract
}

// Done is closed when the current connection ends; Err then says why.
// After Reconnect they describe the new connection.
func (s *Session) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cc.done
}

// Err is why the current connection ended, or nil while it is up.
func (s *Session) Err() error {
	s.mu.Lock()
	cc := s.cc
	s.mu.Unlock()
	return cc.failed()
}

// messageFrame renders a publish or request frame.
func messageFrame(op string, m *pigeon.Message, timeoutMs int64) func(b []byte, id string) []byte {
	return func(b []byte, id string) []byte {
		b = appendHead(b, op, "")
		b = append(b, `,"id":`...)
		b = jsontext.AppendString(b, id)
		if timeoutMs > 0 {
			b = append(b, `,"timeoutMs":`...)
			b = strconv.AppendInt(b, timeoutMs, 10)
		}
		b = append(b, `,"message":`...)
		b = m.AppendJSON(b)
		return append(b, '}')
	}
}

func checkMessage(m *pigeon.Message) error {
	if m == nil {
		return pigeon.NewError(pigeon.CodeEnvelopeInvalid, "message is required")
	}
	// Data the strict validator accepts is JSON, UTF-8 and at most
	// MaxJSONDepth deep; the rest is looked at again, rarely.
	if len(m.Data) > 0 && jsontext.Validate(m.Data, pigeon.MaxJSONDepth) != nil {
		switch {
		case !validData(m.Data):
			return pigeon.NewError(pigeon.CodeEnvelopeInvalid, "data is not valid JSON")
		case !utf8.Valid(m.Data):
			// The frame carrying the message is text, which must be
			// UTF-8: one that is not ends the connection (RFC 6455),
			// failing every call in flight on it. Refused here, as the
			// broker refuses it in process, that message alone.
			return pigeon.NewError(pigeon.CodeInvalidUTF8, "data holds a string that is not valid UTF-8")
		case jsontext.Depth(m.Data) > pigeon.MaxJSONDepth:
			// The server answers data a few levels too deep as the
			// broker does in process; a frame deeper still it cannot
			// read, nor answer: the publish would wait for its deadline.
			return pigeon.NewError(pigeon.CodeEnvelopeInvalid, "data nests deeper than %d levels", pigeon.MaxJSONDepth)
		}
	}
	if !m.ValidText() {
		return pigeon.NewError(pigeon.CodeInvalidUTF8, "an envelope field is not valid UTF-8")
	}
	return nil
}

// validData reports whether data is one JSON text, as json.Valid does
// (the server, not the client, refuses duplicate names and invalid UTF-8
// with their own codes). The strict validator is several times faster and
// accepts only what json.Valid accepts; json.Valid decides the rest.
func validData(data []byte) bool {
	return jsontext.Validate(data, pigeon.MaxJSONDepth) == nil || json.Valid(data)
}

// answerMessage is the message of an answer frame.
func answerMessage(f *Frame) (*pigeon.Message, error) {
	if f.Message == nil {
		return nil, pigeon.NewError(pigeon.CodeInternal, "the server's answer has no message")
	}
	return f.Message, nil
}

// answerMessages is the messages of a receive or replay answer frame
// that the client holds (see heldMessages), for op; each other one is
// left out and logged.
func (s *Session) answerMessages(f *Frame, op string) []*pigeon.Message {
	msgs, _ := s.heldMessages(f, op, nil)
	return msgs
}

// heldMessages is the messages of a receive or replay answer frame that
// the client holds, in order, and in step with them their lease attempts
// taken from attempts (nil: 0 each, none leased). Each other entry is one
// no broker sends, and is refused alone, as a pushed delivery is (see
// refused) and as the TypeScript, Python and Rust clients refuse it: an
// entry the decoder could not read as a message (no object, a member of
// the wrong type: a sequence that is a string, negative or a fraction, an
// id that is a number, …; its text in f.Batch, see decodeFromServer); not
// a message (null); a message without a sequence (every message received
// or replayed comes from the log, and an ack by the id alone would settle
// whichever message holds the id); or, when the answer names attempts,
// one whose attempt is outside 1 to maxAttempt (an ack naming the wrong
// one settles nothing or, 0, any lease). It is logged (WithLogger),
// naming its index and what can be read of its message, and left out:
// not handed over, never answered, so a leased one comes back when its
// ack wait passes, and the others go on, so that one entry cannot hide
// the messages beside it from the caller.
func (s *Session) heldMessages(f *Frame, op string, attempts []int) ([]*pigeon.Message, []int) {
	var kept []int
	if attempts != nil {
		kept = make([]int, 0, len(f.Messages))
	}
	msgs := make([]*pigeon.Message, 0, len(f.Messages))
	for i, m := range f.Messages {
		var why, id string
		var seq uint64
		var err error
		a := 0
		if attempts != nil {
			a = attempts[i]
		}
		switch {
		case f.Batch != nil && f.Batch[i] != nil:
			why, err = "entry that is no message the broker sends", leftOutError(OpMessages, f.Batch[i])
			r := leftOut(OpMessages, f.Batch[i])
			id, seq = r.id, r.seq
		case m == nil:
			why = "entry that is not a message"
		case m.Sequence == 0:
			why, id = "message without a sequence", m.ID
		case attempts != nil && (a < 1 || a > maxAttempt):
			why, id, seq = "message whose attempt is not an integer of 1 to 2^31-1", m.ID, m.Sequence
		default:
			msgs = append(msgs, m)
			if attempts != nil {
				kept = append(kept, a)
			}
			continue
		}
		args := []any{"op", op, "index", i, "messageId", id, "sequence", seq, "attempt", a}
		if err != nil {
			args = append(args, "err", err)
		}
		s.o.logger.Warn("pigeon ws: the server sent a "+op+" "+why+"; not handed over", args...)
	}
	return msgs, kept
}

// Publish admits one message; see Engine.Publish. It is PublishAsync
// and Wait: publishes from many goroutines share frames, and one that
// finds the connection's writer idle writes its frame itself.
func (s *Session) Publish(ctx context.Context, m *pigeon.Message) (*pigeon.Result, error) {
	p, err := s.publishAsync(ctx, m, true)
	if err != nil {
		return nil, err
	}
	return p.Wait(ctx)
}

// PublishAt publishes m at depth hops (pigeon.DepthPublisher): the
// publish frame's "hops". The server takes it only from a principal
// holding pigeon.RoleBridge and refuses it FORBIDDEN from any other;
// hops 0 is Publish. Unlike Publish it does not share a frame with other
// publishes: it waits for its own answer.
func (s *Session) PublishAt(ctx context.Context, m *pigeon.Message, hops uint32) (*pigeon.Result, error) {
	if hops == 0 {
		return s.Publish(ctx, m)
	}
	if err := checkMessage(m); err != nil {
		return nil, err
	}
	f, err := s.call(ctx, depthFrame(m, hops), nil)
	if err != nil {
		return nil, err
	}
	msg, err := answerMessage(f)
	if err != nil {
		return nil, err
	}
	if err := answeredStatus(f.Status); err != nil {
		return nil, err
	}
	return &pigeon.Result{Status: f.Status, Message: msg}, nil
}

// depthFrame renders the publish frame of PublishAt.
func depthFrame(m *pigeon.Message, hops uint32) func(b []byte, id string) []byte {
	return func(b []byte, id string) []byte {
		b = appendHead(b, OpPublish, "")
		b = append(b, `,"id":`...)
		b = jsontext.AppendString(b, id)
		b = append(b, `,"hops":`...)
		b = strconv.AppendUint(b, uint64(hops), 10)
		b = append(b, `,"message":`...)
		b = m.AppendJSON(b)
		return append(b, '}')
	}
}

// Request publishes a request and blocks until its reply or ctx ends
// (REQUEST_TIMEOUT). The server waits as long as ctx's deadline allows,
// or DefaultRequestTimeout when ctx has none, capped by its
// MaxRequestTimeout.
func (s *Session) Request(ctx context.Context, m *pigeon.Message) (*pigeon.Message, error) {
	if err := checkMessage(m); err != nil {
		return nil, err
	}
	var timeoutMs int64
	if dl, ok := ctx.Deadline(); ok {
		timeoutMs = max(1, time.Until(dl).Milliseconds())
	}
	req := requestOf(m)
	f, err := s.call(ctx, messageFrame(OpRequest, req, timeoutMs), nil)
	var pe *pigeon.Error
	if errors.As(err, &pe) && pe.Code == pigeon.CodeRequestTimeout && timeoutMs > 0 && pe.Unwrap() == nil {
		// The server's wait was the caller's deadline.
		return nil, pigeon.WrapError(pe.Code, context.DeadlineExceeded, "%s", pe.Message)
	}
	if err != nil {
		return nil, err
	}
	reply, err := answerMessage(f)
	if err != nil {
		return nil, err
	}
	if err := checkReply(req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// requestOf is m as Request sends it: with an id, drawn here when it has
// none and nothing binds one (a signature covers the id; a repeated
// idempotency key stands for the first request, whose id the caller may
// not know), so that checkReply can tell the reply answers it. m is not
// changed.
func requestOf(m *pigeon.Message) *pigeon.Message {
	if m.ID != "" || m.Signature != nil || m.IdempotencyKey != "" {
		return m
	}
	c := *m
	c.ID = pigeon.NewMessageID()
	return &c
}

// checkReply refuses a reply that does not answer req (as sent, see
// requestOf): a reply is the message a responder published with
// correlationId the request's id, so one without a correlationId answers
// nothing, and one naming another id answers another request. With an
// idempotency key req may repeat an earlier request of another id, whose
// reply is this one's: then any correlationId is taken.
func checkReply(req, reply *pigeon.Message) error {
	if reply.CorrelationID == "" {
		return pigeon.NewError(pigeon.CodeInternal, "the server's reply has no correlationId: it answers no request")
	}
	if req.ID != "" && req.IdempotencyKey == "" && reply.CorrelationID != req.ID {
		return pigeon.NewError(pigeon.CodeInternal, "the server's reply answers another request (correlationId %q, not %q)", reply.CorrelationID, req.ID)
	}
	return nil
}

// Receive pulls up to max messages from subject; see Engine.Receive. It
// is ReceiveAttempts without the attempts: it refuses an answer, or a
// message of it, as ReceiveAttempts does, and returns the same messages.
func (s *Session) Receive(ctx context.Context, subject string, max int) ([]*pigeon.Message, error) {
	msgs, _, err := s.ReceiveAttempts(ctx, subject, max)
	return msgs, err
}

var _ pigeon.AttemptSettler = (*Session)(nil)
var _ pigeon.DepthPublisher = (*Session)(nil)

// ReceiveAttempts is Receive that also returns, in step with the
// messages, the attempt of each one's lease (0 when not leased: a pubsub
// subject, or a server that does not tell it); see
// Engine.ReceiveAttempts. AckAttempt and NackAttempt take it back.
//
// An answer whose attempts are not in step with its messages is refused
// whole, no attempt could be told to its message: INTERNAL for a list of
// another length, BAD_REQUEST for "attempts" that is not a list (null
// included: an answer without "attempts" leased nothing). A message of
// the answer that no broker sends (null, without a sequence, or whose
// attempt is not an integer of 1 to 2^31-1: a fraction, 1.0, a string,
// null, …) is refused alone: logged (WithLogger) and left out, never
// answered, so the server's ack wait gives it back; the others are
// returned, each with its own attempt, and the error is nil. Receive and
// Replay leave such messages out the same way.
func (s *Session) ReceiveAttempts(ctx context.Context, subject string, max int) ([]*pigeon.Message, []int, error) {
	f, err := s.call(ctx, jsonFrame(Frame{Op: OpReceive, Subject: subject, Max: max}), nil)
	if err != nil {
		return nil, nil, err
	}
	if f.Attempts == nil {
		msgs := s.answerMessages(f, OpReceive)
		return msgs, make([]int, len(msgs)), nil
	}
	if len(f.Attempts) != len(f.Messages) {
		return nil, nil, pigeon.NewError(pigeon.CodeInternal, "the server's answer holds %d attempts for %d messages", len(f.Attempts), len(f.Messages))
	}
	msgs, attempts := s.heldMessages(f, OpReceive, f.Attempts)
	return msgs, attempts, nil
}

// AckAttempt acknowledges the received message messageID at sequence seq
// under the lease attempt ReceiveAttempts gave it (0: any lease of the
// principal, as AckSequence); see Engine.AckAttempt.
func (s *Session) AckAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int) error {
	_, err := s.call(ctx, jsonFrame(Frame{Op: OpAck, Subject: subject, MessageID: messageID, Sequence: seq, Attempt: attempt}), nil)
	return err
}

// NackAttempt is NackSequence under the lease attempt ReceiveAttempts
// gave the message (0: any lease of the principal); see
// Engine.NackAttempt.
func (s *Session) NackAttempt(ctx context.Context, subject, messageID string, seq uint64, attempt int, delay time.Duration) error {
	f := Frame{Op: OpNack, Subject: subject, MessageID: messageID, Sequence: seq, Attempt: attempt}
	if delay >= 0 {
		ms := min(delay, pigeon.MaxRetryDelay).Milliseconds()
		f.DelayMs = &ms
	}
	_, err := s.call(ctx, jsonFrame(f), nil)
	return err
}

// Ack acknowledges a received message; see Engine.Ack.
func (s *Session) Ack(ctx context.Context, subject, messageID string) error {
	return s.AckSequence(ctx, subject, messageID, 0)
}

// AckSequence acknowledges the received message messageID at sequence
// seq (its Message.Sequence); see Engine.AckSequence.
func (s *Session) AckSequence(ctx context.Context, subject, messageID string, seq uint64) error {
	return s.AckAttempt(ctx, subject, messageID, seq, 0)
}

// NackSequence gives the received message messageID at sequence seq back
// for redelivery after delay (< 0: the subject's backoff); see
// Engine.NackSequence. A delay above pigeon.MaxRetryDelay waits
// pigeon.MaxRetryDelay, as a push handler's RetryAfter does and the other
// clients' pull nacks do, rather than being sent for the broker to refuse
// with INVALID_ARGUMENT.
func (s *Session) NackSequence(ctx context.Context, subject, messageID string, seq uint64, delay time.Duration) error {
	return s.NackAttempt(ctx, subject, messageID, seq, 0, delay)
}

// Nack gives a received message back for redelivery after delay (< 0:
// the subject's backoff; above pigeon.MaxRetryDelay: that); see
// Engine.Nack.
func (s *Session) Nack(ctx context.Context, subject, messageID string, delay time.Duration) error {
	return s.NackSequence(ctx, subject, messageID, 0, delay)
}

// Replay returns retained messages again; see Engine.Replay. A message
// of the answer that no broker sends (null, or without a sequence) is
// logged and left out, the others returned, as Receive does.
func (s *Session) Replay(ctx context.Context, r pigeon.ReplayRequest) ([]*pigeon.Message, error) {
	f, err := s.call(ctx, jsonFrame(Frame{Op: OpReplay, Subject: r.Subject, Reason: r.Reason, FromSequence: r.FromSequence, ToSequence: r.ToSequence, Max: r.Max}), nil)
	if err != nil {
		return nil, err
	}
	return s.answerMessages(f, OpReplay), nil
}

// Reconnect replaces the connection: it dials again, negotiates a fresh
// contract for the session's subjects, closes the old connection (its
// unacknowledged deliveries go back for redelivery) and resumes every
// subscription on the new one. An acknowledged pubsub subscription resumes
// at the lowest sequence it was handed and has not handled successfully (a
// handler that failed included), else after the highest it handled; the
// deliveries of the old connection still queued are dropped, since the
// resumed subscription delivers them again. A message may so be handled
// twice, never skipped, and never twice at once: its delivery on the new
// connection waits for a handler of the old one still running on it. An
// at-most-once one resumes after the highest
// sequence it received. When dialing or negotiating fails the old
// connection is kept and the error returned; a subscription the new
// contract no longer permits stops with the refusal as its Err. When the
// new connection is lost, or ctx ends, while the subscriptions are resumed
// on it, the error is returned and the subscriptions not resumed are kept:
// the next Reconnect resumes them from the same place.
//
// One Reconnect runs at a time: another waits for it, or its ctx. Close
// ends a Reconnect in flight at once, which returns SESSION_CLOSED.
func (s *Session) Reconnect(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()
	select {
	case s.reconn <- struct{}{}:
	case <-ctx.Done():
		return s.closedOr(ctxError(ctx))
	}
	defer func() { <-s.reconn }()
	if _, err := s.conn(); err != nil {
		return err
	}
	cc, k, lifetime, err := s.connect(ctx)
	if err != nil {
		return s.closedOr(err)
	}
	s.mu.Lock()
	if s.closed {
		// Close began meanwhile: its teardown waits for this Reconnect,
		// and closes the connection the session holds, not this one.
		s.mu.Unlock()
		cc.close(ctx)
		return errSessionClosed()
	}
	old := s.cc
	s.cc, s.contract, s.lifetime = cc, k, lifetime
	subs := make([]*clientSub, 0, len(s.subs))
	for cs := range s.subs {
		subs = append(subs, cs)
	}
	s.mu.Unlock()
	old.close(ctx)
	var lost error
	for _, cs := range subs {
		if cs.isStopping() {
			continue
		}
		start := cs.resumeFrom(old)
		err := cs.subscribeOn(ctx, cc, start)
		if err == nil {
			continue
		}
		if cc.failed() != nil || ctx.Err() != nil {
			// Not a refusal: the new connection was lost, or the caller
			// stopped waiting. The subscription is kept, to resume
			// from the same place on the next Reconnect.
			cs.keepResume(start)
			if lost == nil {
				lost = err
			}
			continue
		}
		s.goBG(func() {
			cs.stopWith(err)
			cs.abandon(cc, err)
		})
	}
	if lost != nil {
		return s.closedOr(lost)
	}
	return nil
}

// closedOr is SESSION_CLOSED once Close has begun (whose start ends what
// was in flight), else err.
func (s *Session) closedOr(err error) error {
	if s.life.Err() != nil {
		return errSessionClosed()
	}
	return err
}

func (s *Session) goBG(fn func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
}

// Close ends the subscriptions (waiting for their handlers, or ctx) and the
// connection; a Reconnect in flight ends at once. When ctx ends first,
// Close returns ctx's error: the subscriptions stop (their handlers'
// contexts end), the acknowledgements of the handlers that succeeded are
// sent all the same, bounded by the write timeout (WithWriteTimeout), the
// connection is dropped, and the rest of the teardown (handlers that do
// not honour their context) goes on without the caller. It is idempotent:
// a Close while another runs, or after one gave up, waits for that
// teardown to finish (or ctx). Called from a subscription's handler with
// the handler's context, it waits for no handler (the caller among them):
// each subscription ends once its handlers have returned; nor, when
// another Close runs, for that Close, which waits for the handler.
func (s *Session) Close(ctx context.Context) error {
	fromHandler := s.fromHandler(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		if fromHandler {
			// The Close running waits for this handler: waiting for it
			// here would wait for ever.
			return nil
		}
		select {
		case <-s.closeDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Marked closed before the teardown waits for a Reconnect in flight
	// (which ends with the session's life, and gives up the connection
	// it dialed when it sees it): a handler's Close or Unsubscribe
	// meanwhile returns at once instead of waiting for this Close, which
	// waits for the handler.
	s.closed = true
	s.endLife()
	s.mu.Unlock()
	ended := make(chan error, 1)
	go func() { // ends once the handlers have returned, whatever ctx says
		defer close(s.closeDone)
		ended <- s.teardown(ctx, fromHandler)
	}()
	select {
	case err := <-ended:
		return err
	case <-ctx.Done():
		select {
		case err := <-ended:
			return err
		default:
			return ctx.Err()
		}
	}
}

// teardown is Close's work, after the session is marked closed: it ends
// the subscriptions and the connection, then waits for the session's
// goroutines (not from a handler, which is one of them).
func (s *Session) teardown(ctx context.Context, fromHandler bool) error {
	s.reconn <- struct{}{} // a Reconnect in flight ends at once: its context ended with the session's life
	defer func() { <-s.reconn }()
	s.mu.Lock()
	cc := s.cc
	subs := make([]*clientSub, 0, len(s.subs))
	for cs := range s.subs {
		subs = append(subs, cs)
	}
	s.mu.Unlock()
	var err error
	for _, cs := range subs {
		if e := cs.unsubscribeOn(ctx, cc); e != nil && err == nil {
			err = e
		}
	}
	cc.close(ctx)
	if !fromHandler {
		s.bg.Wait()
	}
	return err
}
