// Package conformance holds what every Pigeon client is held to: the list of
// scenarios (scenarios.json), the catalog and tokens the scenarios run
// against (policies/, tokens.yaml), the cross-language signing and sealing
// vectors (vectors/), and the server's codes with their HTTP statuses
// (codes.json). Its tests check that every client names every scenario it
// must pass, regenerate nothing unless asked (-update), open and verify what
// each client signed and sealed, and fail when codes.json or the docs'
// tables of codes disagree with the server.
package conformance
