// Package programs binds sandboxed WebAssembly programs to message routes
// of a running engine: an operator deploys a module with a manifest (the
// route, the account it runs as, its limits and environment) and each
// delivery on the route calls the program's handler, which may publish,
// answer the request it handles and log. The ABI, the manifest and the
// checks are docs/programs.md; package programs/guest is the SDK for Go
// programs.
//
// # Model
//
// A Manager holds the programs of one engine. Deploy validates a module
// (header, size, initial memory, the bounds of its tables, globals and
// element segments, compilation, imports limited to the host module and
// a minimal WASI, the ABI's exports, a first instance that starts) and
// binds it: a contract is negotiated for the manifest's
// account and the route subscribed under it, so every delivery and every
// message the program emits passes the same contract checks and gates as
// any other service's; the contract is renewed in place before it
// expires, and a binding whose contract ends all the same is bound again
// under a fresh one. Programs run on wazero, each version in its own
// runtime that caps its memory, with no file system and no socket.
//
// A delivery runs on one instance taken from the version's pool (started
// when none is idle), never shared with another delivery; at most
// route.maxInFlight run at once. A trap, a timeout (the instance is
// closed when the per-message context ends) or an exceeded limit fails
// that delivery only: it is nacked, redelivered with the subject's backoff
// and quarantined as DELIVERY_EXHAUSTED when its attempts run out; the
// instance is discarded. Every deploy, swap, removal, start-up binding and
// failure is audited through Engine.Record.
//
// One message's descendants are bounded wherever the programs publish
// them, as one delivery's emits are by limits.maxEmits: the Manager
// remembers the lineage of the messages its programs publish, and an emit
// more than Options.MaxHops programs deep, or beyond
// Options.MaxDescendants emits from one message from outside the
// programs, is refused PROGRAM_LIMIT_EXCEEDED (audited publish.denied),
// so a program that publishes into its own route, or two into each
// other's, cannot loop or multiply a message without end. A message's
// depth travels with it (pigeon.Message.Hops, which the broker sets from
// the emit's caller, never from what was written): a message that
// crosses to another Manager (a cluster's other node) goes on at its
// depth there, so MaxHops holds across nodes. The tree MaxDescendants
// counts is the Manager's, in memory: a message from another Manager
// starts a fresh one (docs/programs.md).
//
// Programs (manifest, module, version history) are kept in a store.KV and
// bound again by New.
//
// # Concurrency
//
// A Manager is safe for concurrent use. Deploys and removals of one
// program are serialized; different programs proceed in parallel. A new
// version replaces the running one atomically: each delivery runs entirely
// on the version current when it starts, and the old version is closed
// once its deliveries in flight have finished. Get and List show each
// program as of its last change and never wait for one in progress. Close
// unbinds every program, waiting for their deliveries, revokes their
// contracts and stops renewing bindings; call it before the engine's
// Shutdown.
package programs
