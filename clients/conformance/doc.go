// Package conformance holds what every Pigeon client is held to: the list of
// scenarios (scenarios.json), the catalog and tokens the scenarios run
// against (policies/, tokens.yaml), and the cross-language signing and
// sealing vectors (vectors/). Its tests check that every client names every
// scenario it must pass, regenerate nothing unless asked (-update), and open
// and verify what each client signed and sealed.
package conformance
