// Package server is the HTTP face of a standalone Pigeon broker: the
// pigeonmq-compatible JSON API (docs/http.md), the WebSocket endpoint at
// /v1/ws (package transport/ws, docs/protocol.md), and application
// handlers mounted behind the same bearer-token authentication.
//
// # Routes
//
// GET /health and the catalog (GET /v1/subjects, GET /v1/subjects/{name})
// are public. Every other route authenticates "Authorization: Bearer
// <token>" (401 UNAUTHENTICATED without a valid one) and, over TLS
// (Options.TLS), the connection's client certificate: the engine's
// authenticator receives both in a pigeon.Credential (package identity
// verifies SPIFFE certificates and JWTs, docs/identity.md). It acts in the
// region of the x-pigeon-region header (default "uk"). Operations under a
// contract name it in the x-pigeon-contract header or as "contractId" in
// the body. The audit log and the quarantine need the role "auditor" (403
// FORBIDDEN without it); releasing from quarantine also needs a contract
// that lets the auditor publish on the record's subject.
//
// Errors are {"error":{"code","message","details"}} with the status of the
// code (the table of docs/http.md). A known path with another method is 405
// with an Allow header, an unknown path 404, a body that is not JSON 400, a
// body over Options.MaxBody (1 MiB) 413 PAYLOAD_TOO_LARGE, a body marked
// with a Content-Encoding other than identity 400 BAD_REQUEST (the server
// decodes none). An error message is cut to 512 bytes (the cut marked),
// so it quotes only a prefix of what the caller sent; a store's damage
// (STORE_CORRUPT) is answered without the file and offset, which go to the
// Logger.
//
// # Mounting
//
// Mount serves an application handler behind the same authentication; it
// reads the caller with PrincipalFrom and RegionFrom, and refuses with
// WriteError in the form of the API's errors.
//
// # Lifecycle
//
// New, then Serve (or use the Server as an http.Handler in a server of your
// own), then Shutdown, then the engine's Shutdown. A Server is safe for
// concurrent use; Shutdown is idempotent.
package server
