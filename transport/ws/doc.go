// Package ws is the WebSocket transport of Pigeon: the server endpoint a
// standalone broker serves at /v1/ws, and a Go client whose Session is a
// pigeon.Session, so that application code and tests do not change between
// an in-process broker and a remote one. The wire protocol (JSON text
// frames, any language can speak it) is docs/protocol.md.
//
// # Server
//
// NewServer(engine, opts) is an http.Handler. It authenticates the upgrade
// request (an Authorization bearer token, or the subprotocols pigeon.v1 and
// pigeon.bearer.<token> for browsers, and over TLS the client certificate,
// handed to the engine in a pigeon.Credential) and refuses it with the JSON
// error body before upgrading. On the connection, every client frame is answered
// by one frame echoing its id; subscriptions push deliver frames and wait
// for the client's ack or nack, so leases, redelivery, backoff and
// exhaustion stay the engine's; a delivery that never reached the client
// (its frame still in the write queue when the connection or the
// subscription ended, say; such a frame is never written afterwards)
// goes back to its group at once without spending an attempt
// (pigeon.ErrUndelivered). Each connection has a write queue bounded in
// frames and in bytes (Options.WriteQueueBytes, and ServerQueueBytes
// across connections) and its own writer: a slow client holds at most its
// queue's bytes, its subscriptions falling back to the store, and is closed
// with 1008 when its writes make no progress past Options.StallTimeout.
// Frames are refused at the edge as pigeon.CheckJSON refuses ambiguous
// JSON (DUPLICATE_KEY, INVALID_UTF8); a text frame that is not UTF-8
// closes the connection with 1007. Shutdown drains every connection and
// closes it with 1001.
//
// # Client
//
// Dial(ctx, url, credential, subjects, opts...) mirrors Engine.Connect:
// it authenticates, negotiates a contract and returns a *Session. A wss://
// URL dials TLS; WithTLS (built from files by ClientTLS) names the CAs that
// verify the server and the client certificate for mTLS. Every
// refusal is the *pigeon.Error the engine returned, rebuilt from the error
// frame with its code, message, details and decision. Handlers run on the
// client; returning nil acks, an error or a panic nacks. A caller's context
// bounds its own call and never the connection. After the connection is
// lost, calls fail with SESSION_CLOSED (SHUTTING_DOWN after a 1001) until
// Reconnect, which negotiates afresh and resumes the subscriptions.
//
// A subscription's handler runs on one message at a time, in order, or on
// up to pigeon.WithMaxInFlight at once; either way one message's handler
// runs once at a time per subscription, as in the TypeScript client. A
// delivery of a message whose handler is still running (the server
// redelivered it when its ack wait passed, or Reconnect resumed the
// subscription while a handler of the old connection runs) is parked
// until that run returns, then runs in turn and is answered on the
// connection it came on. Parked deliveries count against the
// subscription's window (an at-most-once one's queue bounds) and are let
// go with the queue when the subscription stops. An acknowledgement the
// server no longer expects (the earlier run's, of a delivery the server
// replaced or on a connection that ended) is dropped quietly: logged at
// debug level. Every ack and nack names the sequence of the delivery it
// answers as well as its message id: a late answer to a message that
// retention trimmed never settles a newer message published under the
// same id (see docs/protocol.md).
//
// A message no broker sends (without a sequence, or leased under an
// attempt outside 1 to 2^31-1) is refused alone, whether pushed (deliver,
// deliver_batch) or pulled (the answer of Receive, ReceiveAttempts or
// Replay): logged (WithLogger), never handed over nor answered, so the
// server's ack wait gives a leased one back, while the messages beside it
// are handed over and can be acked. A message whose attempt is no integer
// at all (a fraction, 1.0, a string, null), pulled or pushed, is refused
// alone the same way. So is any entry of a deliver_batch, or of a
// Receive, ReceiveAttempts or Replay answer, that is no delivery or
// message the broker sends: no object, null included, or a message with
// a member of the wrong type (a sequence that is a string, negative or a
// fraction, an id that is a number, a time that is no string, …); its
// log names its index and, where they can be read, its message's id and
// sequence, and the entries beside it are handed over. A deliver whose
// message is no message the broker sends is refused the same way, logged
// with its op and what can be read of its message. A frame whose text
// readers could take differently (a name twice in one object, a lone
// surrogate) is refused whole, logged as undecodable. An answer malformed
// as a whole fails its call: BAD_REQUEST for messages that are not a list,
// INTERNAL for attempts of another length than its messages, BAD_REQUEST
// for attempts that are not a list (null included; an answer without
// attempts leased nothing).
//
// A connection that reads no frame for WithPingInterval (default 15 s; 0
// disables) is pinged, and ends SESSION_CLOSED, logged once, when the pong
// does not come within WithPingTimeout (default 10 s), as the TypeScript
// client does: a server that vanished without closing the connection (a
// half-open TCP connection, a NAT that forgot it) is noticed, its calls
// fail rather than wait for ever, and Reconnect dials again. A connection
// that reads frames never pings. A write that makes no progress for
// WithWriteTimeout (default 30 s: the server stopped reading) ends the
// connection the same way, so no caller waits behind it for ever. The
// session renews its contract by itself shortly before it expires (see
// Session.Renew). The renewals it sends of one contract, retries of a
// failure included, are a floor apart at least: a quarter of the lifetime
// the contract was negotiated for, between 100 ms and 1 s (a quarter of
// the lifetime asked with pigeon.WithContractTTL, when shorter), so that
// a short contract stays renewed while a server granting renewals a few
// milliseconds long, or failing them at once, cannot make the client
// renew in a tight loop: such a contract ends at its expiry. A caller's
// own Renew is not floored.
//
// Close(ctx) and Unsubscribe(ctx) honour ctx: Close ends a Reconnect in
// flight at once and returns ctx's error when ctx ends first, the rest of
// its teardown (handlers that ignore their context) going on without the
// caller. Acknowledgements of handlers that succeeded are sent whatever
// the caller's context says, bounded by WithWriteTimeout, before the
// unsubscribe and the close. Called from any handler of the session with
// the handler's context, Close and Unsubscribe wait for no handler, so
// handlers that close the session or unsubscribe each other's
// subscriptions never wait for each other.
//
// # Publishing fast
//
// PublishAsync queues a message and returns a PendingPublish at once;
// publishes queued while the connection's writer is busy leave together in
// one publish_batch frame (up to MaxPublishBatch), each still judged by
// every gate and audited on its own, its refusal resolving only its own
// PendingPublish. A result of the batch's decisions answer that the
// client cannot read (a status that is no string, a message with a
// member of the wrong type, an error that is no error, a result that is
// no object) fails only its own PendingPublish, BAD_REQUEST, saying that
// the message may have been accepted all the same: look it up, or
// publish it again under an idempotency key, rather than take it for
// refused; the others resolve with their decisions. An answer the client
// cannot read at all (a lone publish's decision, a whole decisions frame)
// fails its publishes with the decoder's code, saying the same, unless it
// reads as an error frame. In-flight publishes
// are bounded per Session (WithMaxPendingPublishes); a lost connection
// resolves every one of them with its transport error. Publish is
// PublishAsync then Wait. The frames ask for brief answers, which leave
// out an accepted message's data (the data sent); the client puts a copy
// of the data it sent back into Result.Message, so results are the same
// as from a full answer. The server limits each connection to
// Options.PublishRate messages a second (default 1,000,000), counting
// every message of a batch. PublishAt
// (pigeon.DepthPublisher) publishes at a depth, the frame's "hops", which
// the server takes only from a principal holding pigeon.RoleBridge and
// refuses FORBIDDEN from any other; a request frame's "hops" follows the
// same rule.
//
// # Refusals are audited
//
// Every RATE_LIMITED refusal of the server's own bounds, made before the
// engine sees the frame, leaves a record in the engine's audit log with
// the principal, the contract, the subject when the catalog has it, and a
// Ref naming where it was refused, as the engine's own gates' refusals
// do: a publish, request or publish_batch frame past the connection's
// publish rate ("ws publish connection rate"), a request beyond the
// connection's MaxInFlight waiting ("ws request in flight") or its
// principal's MaxRequestBytesPerPrincipal ("ws request bytes"), each
// publish.denied; a replay or receive frame that found no room in the
// read pool (MaxReadBytesInFlight, MaxReadBytesPerPrincipal: "ws replay
// read budget", "ws receive read budget"), replay.denied or
// receive.denied; an upgrade beyond MaxConnections or
// MaxConnectionsPerPrincipal ("ws upgrade connection limit", "ws upgrade
// connections per principal"), access.denied. The engine coalesces them
// per event, principal, subject and code, whatever the Ref: a flood
// writes a record and a count a second, not a record a frame, the count
// naming the latest refusal's Ref ("coalesced:N last:ws request bytes",
// with "(refs differ)" before "last:" when the refusals it stands for
// were made at more than one place).
//
// # Concurrency
//
// Server and Session are safe for concurrent use by any number of
// goroutines. Frames of one connection are worked on concurrently (up to
// Options.MaxInFlight), except negotiate, which is a barrier: every frame
// read after it runs under the new contract. Answers are matched by id, not
// by order. Server.Shutdown and Session.Close are idempotent.
package ws
