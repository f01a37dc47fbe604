//go:build !linux

package ws_test

// syscallCount is not measured here: the benchmarks leave syscalls/msg out.
func syscallCount() int64 { return -1 }
