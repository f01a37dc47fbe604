// Package crashtest kills a process that is writing and lets a test check
// what survived. It is a test helper shared by the store and the broker.
//
// The test binary plays both parts. The parent test calls Run; Run starts
// the same binary again (os.Args[0]) running only the child test, with the
// data directory in an environment variable. The child opens the store,
// writes in a loop and calls Ack after every write that returned, which
// prints one "ACK ..." line. Run SIGKILLs the child at a random moment,
// collects the complete ACK lines and hands them to Check, which reopens
// the store and requires every acknowledged write to be there. Then the
// next round starts a child on the same directory.
//
//	func TestCrash(t *testing.T) {
//		crashtest.Run(t, crashtest.Config{
//			Child: "TestCrashChild", Rounds: 10,
//			Check: func(t *testing.T, dir string, acks []string) { ... },
//		})
//	}
//
//	func TestCrashChild(t *testing.T) {
//		dir, ok := crashtest.ChildDir()
//		if !ok {
//			t.Skip("runs as the child of TestCrash")
//		}
//		... open dir, write, crashtest.Ack("msg", subject, seq, id) ...
//	}
package crashtest

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvDir carries the data directory to the child.
const EnvDir = "PIGEON_CRASHTEST_DIR"

// Config describes a crash test.
type Config struct {
	// Child is the name of the test function the child runs.
	Child string
	// Dir is the data directory; empty means a new t.TempDir().
	Dir string
	// Rounds is how many children are started and killed. Default 10.
	Rounds int
	// MinRun and MaxRun bound how long a child writes, counted from its
	// first ACK, before it is killed. Default 20ms and 250ms.
	MinRun, MaxRun time.Duration
	// Check runs after each kill with the ACK lines (without the "ACK "
	// prefix) of every round so far, oldest first.
	Check func(t *testing.T, dir string, acks []string)
}

// ChildDir returns the data directory when the running test is a child.
func ChildDir() (string, bool) {
	dir := os.Getenv(EnvDir)
	return dir, dir != ""
}

var ackMu sync.Mutex

// Ack prints one acknowledgement line. Call it only after the write it
// reports has returned. Each line is one write(2) so that a kill never
// leaves half a line followed by another.
func Ack(fields ...any) {
	var b strings.Builder
	b.WriteString("ACK")
	for _, f := range fields {
		fmt.Fprintf(&b, " %v", f)
	}
	b.WriteByte('\n')
	ackMu.Lock()
	defer ackMu.Unlock()
	_, _ = os.Stdout.WriteString(b.String())
}

// Run runs the rounds; see the package documentation.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.Rounds <= 0 {
		c.Rounds = 10
	}
	if c.MinRun <= 0 {
		c.MinRun = 20 * time.Millisecond
	}
	if c.MaxRun <= c.MinRun {
		c.MaxRun = c.MinRun + 230*time.Millisecond
	}
	if c.Dir == "" {
		c.Dir = t.TempDir()
	}
	var all []string
	for round := range c.Rounds {
		acks, err := runChild(c)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		all = append(all, acks...)
		t.Logf("round %d: child killed after %d acknowledged writes", round, len(acks))
		c.Check(t, c.Dir, all)
		if t.Failed() {
			return
		}
	}
}

func runChild(c Config) ([]string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+c.Child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), EnvDir+"="+c.Dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	first := make(chan struct{})
	lines := make(chan []string, 1)
	go func() { lines <- readAcks(out, first) }()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
	}
	d := c.MinRun + rand.N(c.MaxRun-c.MinRun)
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	acks := <-lines
	_ = cmd.Wait()
	if len(acks) == 0 {
		return nil, fmt.Errorf("the child acknowledged nothing (does %s write and call Ack?)", c.Child)
	}
	return acks, nil
}

// readAcks collects complete ACK lines until EOF; a last line without its
// newline was cut by the kill and is dropped.
func readAcks(r io.Reader, first chan<- struct{}) []string {
	var acks []string
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if len(acks) == 0 {
				close(first)
			}
			return acks
		}
		if rest, ok := strings.CutPrefix(line, "ACK "); ok {
			if len(acks) == 0 {
				close(first)
			}
			acks = append(acks, strings.TrimSuffix(rest, "\n"))
		}
	}
}
