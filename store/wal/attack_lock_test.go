package wal

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A second store on a held directory (a second `pigeon serve --data` on
// the same directory) is refused with an error that names the holder, so
// the operator knows which process to look at; the lock dies with its
// holder. Before, the error said only "locked by another process".
func TestLockedNamesTheHolder(t *testing.T) {
	if dir := os.Getenv("PIGEON_LOCK_HOLDER_CHILD"); dir != "" {
		s, err := Open(dir, nil)
		if err != nil {
			os.Exit(2)
		}
		fmt.Println("LOCKED")
		time.Sleep(time.Minute) // killed long before
		_ = s.Close(context.Background())
		return
	}
	t.Run("same process", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir, nil)
		_, err := Open(dir, nil)
		require.ErrorIs(t, err, store.ErrLocked)
		var le *LockedError
		require.ErrorAs(t, err, &le)
		require.Equal(t, s.Dir(), le.Dir)
		require.Equal(t, os.Getpid(), le.PID)
		require.Contains(t, err.Error(), fmt.Sprint("pid ", os.Getpid()))
	})
	t.Run("another process", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockedNamesTheHolder$")
		cmd.Env = append(os.Environ(), "PIGEON_LOCK_HOLDER_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "LOCKED\n", line)
		_, err = Open(dir, nil)
		var le *LockedError
		require.ErrorAs(t, err, &le)
		require.Equal(t, cmd.Process.Pid, le.PID)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		s, err := Open(dir, nil) // the kernel released the lock with its holder
		require.NoError(t, err)
		require.NoError(t, s.Close(t.Context()))
	})
}
