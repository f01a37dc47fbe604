//go:build unix

package ws_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used so far, user and system:
// on a machine shared with other work it varies far less than the wall
// clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
