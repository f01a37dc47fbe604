// Package pigeon is a contract-native message broker that Go services embed,
// test against in process, or run as a standalone server.
//
// # The model
//
// Every message runs under a contract. A service authenticates (an
// Authenticator resolves its credential to a Principal; nothing in a message
// body can change who sent it), negotiates a contract (the subjects it asks
// for intersected with the catalog's policy at identity level, compiled once
// per policy version, with an unguessable id and a TTL that ends, at the
// latest, when the credential does: Principal.Expires), and communicates
// under that contract: Publish, Subscribe, Receive, Ack, Nack, Request and
// Replay. A networked broker hands the Authenticator a whole Credential (a
// bearer token and the TLS client certificates) when it is a
// CredentialAuthenticator; package identity provides mTLS with SPIFFE IDs
// and OIDC/JWT methods in an ordered chain, and the contract records how
// its principal was authenticated (ContractInfo.Auth).
//
// Every published message passes an ordered chain of admission gates: the
// built-in ones (envelope, contract, rules with CEL conditions, data
// policy, schema and the rest), then the application's own (Options.Gates),
// then duplicate detection in the store. The order is written in one place,
// docs/policy.md, "Gate order on publish". The first gate that does not
// allow decides. A refusal is returned as *Error carrying a stable Code and
// the Decision; where the subject's policy says so the message is kept in
// quarantine with every forbidden and tokenized field, and every card
// number anywhere in its data, replaced by "[REDACTED]". Every decision and lifecycle event is an AuditRecord in a
// SHA-256 hash chain that VerifyAudit checks.
//
// # Delivery
//
// On a pubsub subject every subscriber receives every message it may see,
// in sequence order; a selector such as "/kind=chat/room=lobby" routes by
// content. On a work-queue subject the members of a consumer group compete
// for messages under leases; a failed or expired delivery is retried with
// the subject's backoff and, after its attempts, quarantined or dropped
// with an audit record. Request/reply routes a reply to the waiting
// requester by correlation id. See docs/delivery.md.
//
// # Concurrency
//
// An Engine and its Sessions are safe for concurrent use by any number of
// goroutines. Every call that can block takes a context.Context and returns
// when it ends. Handlers run on goroutines the engine owns, at most
// WithMaxInFlight at a time per subscription. Shutdown stops accepting
// work (a publish, ack, negotiation, subscription or directory change
// begun after it is refused SHUTTING_DOWN), ends subscriptions, waits for
// the operations already in flight and the engine's goroutines (or for
// its context), writes what is left of the audit queue, so that nothing
// answered before it lacks its audit record, and is idempotent. Values
// handed to the engine (Options, Messages) are copied; the engine never
// mutates them.
//
// # Storage
//
// Options.Store is the persistence seam (package store). The default is an
// in-memory store; store/wal is the durable one.
//
// # Several nodes
//
// Engines on several machines can share one replicated store (the
// store/jetstream module, on NATS JetStream). Options.Cluster then carries
// what an engine otherwise keeps to itself: notices of new messages and of
// replies, changes to the access directory and to contracts, and
// work-queue leases that hold cluster-wide (see Cluster and
// docs/cluster.md). A Cluster that is also a ClusterBarrier makes every
// call that takes access away return only once every live node applied it
// (or fail with CLUSTER_UNCONFIRMED, the change made). With
// Options.Cluster nil nothing of this runs.
package pigeon
