//go:build unix

package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// childArgsEnv holds, in a child process this test binary starts, the
// command line that TestRunChild runs through Run, as a JSON array.
const childArgsEnv = "PIGEON_TEST_RUN_ARGS"

// childReady is the line the child writes to stderr once Run catches
// SIGINT and SIGTERM.
const childReady = "test child: signals caught"

// TestRunChild is not a test: in a child process started by runChild it
// runs the command line of childArgsEnv through Run, as cmd/pigeon does,
// and exits with Run's status.
func TestRunChild(t *testing.T) {
	args, ok := os.LookupEnv(childArgsEnv)
	if !ok {
		t.Skip("runs only in a child process of runChild")
	}
	testHookSignalsCaught = func() { fmt.Fprintln(os.Stderr, childReady) }
	var list []string
	require.NoError(t, json.Unmarshal([]byte(args), &list))
	os.Args = append([]string{"pigeon"}, list...)
	os.Exit(Run())
}

// child is a pigeon process: this test binary re-executed to run Run.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser // held open: a read of standard input blocks
	lines chan string    // its standard error and output, line by line
	ended chan error     // what Wait returned, once it has
}

func runChild(t *testing.T, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunChild$", "-test.count=1")
	list, err := json.Marshal(args)
	require.NoError(t, err)
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(list))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, w, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(t, cmd.Start())
	w.Close()
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 256), ended: make(chan error, 1)}
	go func() { c.ended <- cmd.Wait() }()
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		out.Close()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.ended
		stdin.Close()
	})
	return c
}

// waitLine waits (20 s at most) for a line of the child that holds want,
// and returns what it printed until then.
func (c *child) waitLine(t *testing.T, want string) string {
	t.Helper()
	var seen strings.Builder
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child ended without printing %q; it printed:\n%s", want, seen.String())
			}
			seen.WriteString(l + "\n")
			if strings.Contains(l, want) {
				return seen.String()
			}
		case <-deadline:
			t.Fatalf("the child did not print %q; it printed:\n%s", want, seen.String())
		}
	}
}

// exitCode waits (20 s at most) for the child to end and returns its
// exit status.
func (c *child) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case err := <-c.ended:
		c.ended <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			require.True(t, ee.Exited(), "the child was killed by a signal: %v", err)
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		t.Fatal("the child did not end")
		return -1
	}
}

// Run turned SIGINT and SIGTERM into the end of Main's ctx, and nothing
// else: a command held where it does not watch ctx (here `publish --file
// -` reading a terminal or a pipe that never ends; a blocking open or a
// shutdown that hangs would be the same) could be stopped by neither
// Ctrl-C nor SIGTERM, however often sent, but only by SIGKILL. The first
// signal still ends ctx; a second one ends the process at once with
// status 128 + the signal's number.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{
		{syscall.SIGINT, 130},
		{syscall.SIGTERM, 143},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			c := runChild(t, "publish", "--url", "http://127.0.0.1:1", "--file", "-")
			c.waitLine(t, childReady)
			require.NoError(t, c.cmd.Process.Signal(tc.sig))
			c.waitLine(t, "a second signal stops at once")
			require.NoError(t, c.cmd.Process.Signal(tc.sig))
			require.Equal(t, tc.code, c.exitCode(t))
		})
	}
}

// The first signal keeps its graceful shutdown: serve, signalled once,
// stops cleanly with status 0.
func TestFirstSignalShutsDownGracefully(t *testing.T) {
	c := runChild(t, "serve", "--addr", "127.0.0.1:0", "--data", "")
	c.waitLine(t, childReady)
	c.waitLine(t, "Ctrl-C stops it")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	c.waitLine(t, "stopped cleanly")
	require.Equal(t, 0, c.exitCode(t))
}
