// Package leakcheck fails a test binary that ends with goroutines of its
// own still running.
package leakcheck

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ignored are goroutines that belong to the runtime or the test framework.
var ignored = []string{
	"testing.Main(",
	"testing.tRunner(",
	"testing.(*M).",
	"testing.runFuzzing",
	"runtime.goexit",
	"created by runtime.gc",
	"runtime.MHeap_Scavenger",
	"signal.signal_recv",
	"sigterm.handler",
	"runtime_mcall",
	"goroutine in C code",
	"os/signal.loop",
	"net/http.(*persistConn)",
	// a worker parked between ops (transport/ws workers.go), kept for
	// the process's next op
	"pigeon/transport/ws.(*workers).park(",
}

func interesting(stack string) bool {
	if strings.Contains(stack, "leakcheck.Check") || strings.HasPrefix(stack, "goroutine") && strings.Contains(stack, "[running]") && strings.Contains(stack, "runtime.Stack") {
		return false
	}
	for _, s := range ignored {
		if strings.Contains(stack, s) {
			return false
		}
	}
	return true
}

// Check waits up to timeout for stray goroutines to end and returns an
// error listing those still running.
func Check(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		buf := make([]byte, 2<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if interesting(g) {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Strings(left)
			return fmt.Errorf("leakcheck: %d goroutines still running:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
