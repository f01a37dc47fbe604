//go:build !linux

package wal

import "testing"

// mountReadOnly skips the test: a read-only bind mount is Linux's.
func mountReadOnly(t *testing.T, _ string) {
	t.Helper()
	t.Skip("cannot bind-mount here (Linux only)")
}
