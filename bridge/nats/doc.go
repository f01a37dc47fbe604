// Package natsbridge is a governed edge between Pigeon and NATS: routes
// that carry a Pigeon subject to a NATS subject (Out) or a NATS subject to a
// Pigeon subject (In), on core NATS or JetStream. It is a module of its own
// (pigeon/bridge/nats), so that embedding Pigeon stays free of NATS.
//
// # Identity and contract
//
// A bridge is one Pigeon client. It dials the broker through a
// pigeon.Dialer (transport/inproc in process, transport/ws to `pigeon
// serve`) with its own credential; the broker resolves its identity and
// negotiates one contract for the subjects of its routes. Nothing in a NATS
// message can name another identity: the broker sets every message's
// source to the bridge's principal. So what enters Pigeon through an In
// route passes every admission gate under the bridge's contract, like any
// publish, and what leaves through an Out route is what that contract may
// receive, checked again by the broker at every delivery.
//
// # Out
//
// An Out route subscribes to its Pigeon subject and publishes each
// delivery to its NATS subject as the message's envelope JSON (the bytes
// subscribers receive), with the headers Nats-Msg-Id (the Pigeon message
// id, so a stream drops a repeat; "b64:" and the id in base64url when a
// header would not keep it exactly, such as white space at an end),
// Pigeon-Subject, Pigeon-Sequence and Pigeon-Bridge (the route's name),
// and on JetStream with one delivery in flight Pigeon-Resume (where a
// bridge that starts resumes: the lowest sequence of a delivery that
// failed and waits for its retry, or the one after the message's). A
// delivery is acknowledged only once NATS took it: after a flush on core
// NATS (and no permission violation reported for it, which the
// connection's error handler hears), after the PubAck on
// JetStream, read back: any client that sees the publish on its subject
// could answer its reply inbox first, so a PubAck counts only when the
// route's stream holds this very message (on the route's NATS subject,
// the same bytes) at the sequence it names. A PubAck that says
// "duplicate" for a message the stream holds from another publisher or
// subject would keep the delivery out of the stream, so the route
// publishes it again without the id.
// A NATS failure returns an error and the broker redelivers, within the
// subject's retry policy.
//
// On a pubsub subject a renewed session resumes where the last one left
// off. A bridge that starts resumes too on JetStream: the last message
// the stream holds on the route's NATS subject, when the route published
// it (its Pigeon-Subject and Pigeon-Bridge headers), names the last Pigeon
// sequence the stream took, and the route starts after it (at its
// Pigeon-Resume, when that is lower: a delivery before it may not have
// reached the stream). Otherwise (core
// NATS, no such message, several deliveries in flight, a sequence beyond
// the subject's end) it starts at the subject's end, and what was
// published while no bridge ran is not carried.
//
// # In
//
// An In route subscribes to core NATS, or consumes from a durable pull
// consumer on a JetStream stream, and publishes each message through the
// bridge's session: a payload that is an envelope is decoded as one
// (pigeon.DecodeMessage), any other as data under the route's Template. The
// route's Subject always wins. The message id comes from the NATS side
// (nats-<stream>/<durable>-<created>-<stream sequence> on JetStream, the Nats-Msg-Id header on
// core NATS, scoped to the route), so a redelivery is recognised:
// MESSAGE_ID_TAKEN or "duplicate" for a redelivered message counts as
// accepted. On JetStream a
// message is acknowledged after the broker accepted it, terminated when a
// gate refused it, and redelivered later (NakWithDelay) when the failure
// may pass; the messages of a pull that wait behind the one published are
// kept (InProgress), so that a slow broker does not let the consumer's ack
// wait hand them out again. A message that one of the bridge's own Out routes published
// (its Pigeon-Bridge header) is skipped, and so, on core NATS, is NATS's
// own traffic that a wildcard matched: reply inboxes (a stream's PubAck)
// and $ subjects (the JetStream API).
//
// # Loops
//
// A bridge skips what its own Out routes published, but a loop through two
// bridges (Out X to a NATS subject, another bridge's In from it to Y, an
// Out of Y, an In back to X), or through a bridge and a program, gives
// each pass a fresh id: neither the broker's ids nor a stream's dedupe end
// it. Each pass through an In route counts as one hop, as a program's emit
// does (pigeon.Message.Hops). An envelope an Out route published carries
// the hops the broker stored; the In route publishes it at one more, and
// refuses one that carries Options.MaxHops or more (DefaultMaxHops, the
// programs' own default) with HOPS_EXCEEDED (CodeHopsExceeded): counted,
// logged, terminated on JetStream, like the bridge's other refusals. Data,
// and an envelope without hops, are published at 1. So a loop of bridges
// and programs, on one broker or several, ends within MaxHops passes and
// emits.
//
// A NATS publisher chooses the hops of the envelopes it sends: 0 (a new
// root), or up to MaxHops-1, which leaves programs handling its message
// fewer levels of emits (none at MaxHops-1), as if it came out of a
// chain. Only who may publish on an In route's NATS subject can do that,
// and only to its own messages; a bridge whose NATS publishers must not
// (its routes loop nowhere) sets MaxHops negative: nothing is counted or
// refused, and every message is at depth 0.
//
// The broker writes a message's depth from its publisher's caller, and a
// client cannot choose it. A bridge in process (a transport/inproc
// Dialer) publishes at the depth it counts, as its embedder's caller.
// Over WebSocket (the standalone pigeon-bridge) the session asks for the
// depth (pigeon.DepthPublisher, the publish frame's "hops"), and the
// broker takes it only from a principal holding the role bridge
// (pigeon.RoleBridge), which an administrator gives the bridge's account.
// Without it the broker refuses the depth; the bridge logs that once a
// session and publishes at 0, as any client: then MaxHops refuses only
// what programs made deep within one pass, and a loop through the bridge
// is not bounded.
//
// # Sessions
//
// When the session fails (the connection lost, the contract expired) the
// bridge dials again with a jittered backoff and resumes every route; it
// renews a contract before it expires. A revoked contract or grant, or a
// refused credential, stops the bridge: Run returns the typed error.
//
// # Concurrency
//
// A Bridge is safe for concurrent use. Run blocks; Shutdown stops it and is
// idempotent; Stats may be called at any time. Every goroutine the bridge
// starts ends before Run returns. docs/bridges.md is the full reference.
package natsbridge
