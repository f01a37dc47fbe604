package wal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Windows drops a trailing '.' from a name it creates and takes CON, NUL,
// COM1 and the like (alone or before a '.') for devices: the subject
// "orders." would have lived in a directory named "orders", which Open
// then refuses as the directory of another subject, and "aux.logs" could
// not have been created. On Windows such bytes are escaped too; elsewhere
// the names are unchanged, so existing data directories open as before.
func TestSubjectDirsOnWindows(t *testing.T) {
	cases := []struct{ name, windows, unix string }{
		{"orders.", "orders%2E", "orders."},
		{"..", "%2E%2E", "%2E."},
		{"a.b", "a.b", "a.b"},
		{"con", "%63on", "con"},
		{"NUL", "%4EUL", "NUL"},
		{"aux.logs", "%61ux.logs", "aux.logs"},
		{"Com1", "%43om1", "Com1"},
		{"lpt9.x.", "%6Cpt9.x%2E", "lpt9.x."},
		{"com10", "com10", "com10"},
		{"console", "console", "console"},
		{"orders.created", "orders.created", "orders.created"},
	}
	seen := map[string]string{}
	for _, c := range cases {
		require.Equal(t, c.windows, subjectDirOn("windows", c.name), c.name)
		require.Equal(t, c.unix, subjectDirOn("linux", c.name), c.name)
		require.Equal(t, c.unix, subjectDirOn("darwin", c.name), c.name)
		if prev, ok := seen[c.windows]; ok {
			t.Fatalf("%q and %q share directory %q", prev, c.name, c.windows)
		}
		seen[c.windows] = c.name
	}
	// an escaped name that reaches 200 bytes is hashed, as elsewhere
	long := subjectDirOn("windows", "con."+string(make([]byte, 70)))
	require.Equal(t, byte('#'), long[0])
}
