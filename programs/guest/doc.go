// Package guest is the software development kit for Pigeon programs
// written in Go: a program built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o prog.wasm .
//
// registers one handler with Handle in an init function and is deployed
// with PUT /v1/programs/{name} (or pigeon program deploy). The handler is
// called once for every delivery on the program's route; it publishes
// with Publish, answers a request with Reply and logs with Log. Returning
// an error fails the delivery, which is then redelivered.
//
// The ABI this package speaks is docs/programs.md. Message and its
// helpers compile on every platform; Handle, Publish, Reply and Log exist
// only under GOOS=wasip1.
//
// # Concurrency
//
// The broker never calls one instance of a program concurrently: a
// handler runs alone in its instance, and may keep state in package
// variables between deliveries, but must not rely on it (an instance may be
// replaced at any time, and several instances run side by side).
package guest
