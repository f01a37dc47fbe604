package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// testHookSignalsCaught, when set, is called once signalContext catches
// SIGINT and SIGTERM (a test that signals a child process waits for it).
var testHookSignalsCaught func()

// signalContext returns a context that ends at the first SIGINT or
// SIGTERM, so that the command stops as it does when its ctx ends (serve
// shuts down gracefully), and says so on stderr. A second one of either
// calls exit with 128 + the signal's number (130 for SIGINT, 143 for
// SIGTERM), as a shell reports a process the signal killed: a command
// held where it does not watch ctx (a read of a terminal or of a pipe, a
// shutdown that hangs) is stopped at once. stop releases the signals.
func signalContext(parent context.Context, stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if testHookSignalsCaught != nil {
		testHookSignalsCaught()
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case s := <-sigs:
			fmt.Fprintf(stderr, "pigeon: %v: stopping (a second signal stops at once)\n", s)
			cancel()
		}
		select {
		case <-done:
		case s := <-sigs:
			fmt.Fprintf(stderr, "pigeon: %v again: stopping at once\n", s)
			exit(signalStatus(s))
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		<-finished
		cancel()
	}
}

// signalStatus is the exit status of a process stopped by s: 128 + its
// number.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}
