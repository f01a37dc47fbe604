package wal

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mountReadOnly bind-mounts dir over itself read-only until the test ends;
// it skips the test where it may not mount (CAP_SYS_ADMIN, root in most
// containers).
func mountReadOnly(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount (%v)", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	require.NoError(t, syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""))
}
