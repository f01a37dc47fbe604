// Package regfiletest helps tests that put a named pipe where a regular
// file is expected: a reader that does not refuse it waits on its open
// for a writer that never comes.
package regfiletest

import (
	"os"
	"testing"
	"time"
)

// Within runs f and returns what it returns. If f is still running after
// 20 s, it opens pipe for writing, which sets an open blocked on it free,
// waits for f to end, and fails the test: f blocked on pipe.
func Within[T any](t testing.TB, pipe string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(20 * time.Second):
		if w, err := os.OpenFile(pipe, os.O_RDWR, 0); err == nil {
			w.Close()
		}
		v := <-done
		t.Fatalf("blocked on %s", pipe)
		return v
	}
}
