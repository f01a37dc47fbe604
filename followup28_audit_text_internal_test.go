package pigeon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAuditTextTellsLongTextsApart: two texts past the bound that share
// what the record keeps of them (two principals of 1024 bytes that differ
// at the end, say) are kept as two texts, so a refusal's record still
// says which of them it was of.
func TestAuditTextTellsLongTextsApart(t *testing.T) {
	prefix := strings.Repeat("p", 900)
	for _, tc := range []struct{ name, a, b string }{
		{"differ at the end", prefix + "-alice", prefix + "-bob"},
		{"same length", prefix + "a", prefix + "b"},
		{"invalid bytes at the end", prefix + "\xff", prefix + "\xfe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := auditText(tc.a), auditText(tc.b)
			require.NotEqual(t, a, b)
			require.LessOrEqual(t, len(a), maxAuditText)
			require.Equal(t, a, auditText(tc.a), "the same text is kept the same way")
		})
	}
}
