package cli

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"pigeon/internal/regfile"
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

// Bounds on the files an operator names on the command line or in the
// config file, well above any real one; a larger file is refused, not
// read.
const (
	// maxConfigFile bounds --config, --tokens, --metrics-token-file and a
	// program's --manifest.
	maxConfigFile = 8 << 20
	// maxPayloadFile bounds a program's --module (programs.DefaultMaxModuleSize
	// is 32 MiB) and the --file of publish and of the access commands
	// (standard input included).
	maxPayloadFile = 64 << 20
)

// readRegularFile reads the file at path, refusing what is not a regular
// file (links followed) and what holds more than limit bytes. The open
// does not block: os.ReadFile would wait on a named pipe for a writer
// that never came, and read a device such as /dev/zero until memory ran
// out, and neither can be stopped but by a second signal.
func readRegularFile(path string, limit int64) ([]byte, error) {
	f, fi, err := regfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, fileTooLarge(path, limit)
	}
	return readAtMost(f, path, limit)
}

// readAtMost reads r to its end, refusing more than limit bytes; name
// names r in the error.
func readAtMost(r io.Reader, name string, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fileTooLarge(name, limit)
	}
	return b, nil
}

func fileTooLarge(name string, limit int64) error {
	return fmt.Errorf("%s: larger than %d MiB, the most pigeon reads from it", name, limit>>20)
}
