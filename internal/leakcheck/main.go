package leakcheck

import (
	"os"
	"testing"
	"time"
)

// Main runs the tests of a package and then fails the binary when
// goroutines of its own are still running. Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Check(10 * time.Second); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
