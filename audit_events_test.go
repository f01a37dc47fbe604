package pigeon_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuditEventsAreConstants: every audit record the broker writes is
// built through Event.record from a typed constant; no file outside
// audit.go spells an event type as a string.
func TestAuditEventsAreConstants(t *testing.T) {
	consts, err := os.ReadFile("audit.go")
	require.NoError(t, err)
	names := regexp.MustCompile(`Event\w+\s+Event = "([a-z.]+)"`).FindAllStringSubmatch(string(consts), -1)
	require.Greater(t, len(names), 30, "the event constants moved: update this test")
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	literal := regexp.MustCompile(`store\.AuditRecord\{[^}]*\bType:`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "audit.go" {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src := string(b)
		require.False(t, literal.MatchString(src), "%s builds an audit record's Type by hand; use Event.record", f)
		for _, n := range names {
			require.NotContains(t, src, `"`+n[1]+`"`, "%s spells the audit event %q; use its Event constant", f, n[1])
		}
	}
}
