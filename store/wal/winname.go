package wal

import (
	"fmt"
	"strings"
)

// windowsSafe escapes what Windows would not keep in an escaped subject's
// directory name: it drops a trailing '.' from a name it creates (so the
// directory of "a." would be found as "a", which is not its name), and it
// takes CON, PRN, AUX, NUL, COM0-9 and LPT0-9, alone or before a '.', in
// any case, for devices. The escaped byte is the one the name had, so the
// names stay those of distinct subjects.
func windowsSafe(d string) string {
	if base, _, _ := strings.Cut(d, "."); windowsDevice(base) {
		d = fmt.Sprintf("%%%02X", d[0]) + d[1:]
	}
	if strings.HasSuffix(d, ".") {
		d = d[:len(d)-1] + "%2E"
	}
	return d
}

// windowsDevice reports whether base is a device name on Windows.
func windowsDevice(base string) bool {
	switch strings.ToUpper(base) {
	case "CON", "PRN", "AUX", "NUL":
		return true
	}
	if len(base) == 4 && base[3] >= '0' && base[3] <= '9' {
		switch strings.ToUpper(base[:3]) {
		case "COM", "LPT":
			return true
		}
	}
	return false
}
