package cli

import (
	"fmt"
	"os"
	"runtime"
)

// checkNotWorldWritable refuses a file that every user of the machine may
// write: the tokens file, the config file, the server's key and
// certificate and the client CAs decide who is let in, so anyone who can
// change one can let themselves in. A missing file is left to the reader
// to report. Windows has no such mode bits.
func checkNotWorldWritable(path string) error {
	if runtime.GOOS == "windows" || path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%s: world-writable (mode %04o): anyone on this machine could change it; chmod o-w %s", path, fi.Mode().Perm(), path)
	}
	return nil
}

// readableByOthers reports whether every user of the machine may read a
// file that holds secrets (the tokens file, the server's key), and its
// mode. Such a file is served, since files checked out of version control
// are 0644, but serve warns of it.
func readableByOthers(path string) (os.FileMode, bool) {
	if runtime.GOOS == "windows" || path == "" {
		return 0, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	return fi.Mode().Perm(), fi.Mode().Perm()&0o004 != 0
}
