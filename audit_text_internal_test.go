package pigeon

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// auditText keeps short valid text as it is, and makes anything else
// valid UTF-8 of at most maxAuditText bytes, cut on a character boundary
// and marked with the length it had.
func TestAuditText(t *testing.T) {
	at := strings.Repeat("a", maxAuditText)
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"short", "payments.authorize", "payments.authorize"},
		{"at the bound", at, at},
		{"invalid bytes", "id\xff\xfe", "id\uFFFD"},
		{"a truncated character", "caf\xc3", "caf\uFFFD"},
		{"control characters", "a\x1b[2J\u009b\r", `"a\x1b[2J\u009b\r"`},
		{"control character and invalid bytes", "a\n\xff", "\"a\\n\uFFFD\""},
		{"one byte over", at + "b", strings.Repeat("a", maxAuditText-len(cutMark(at+"b"))) + cutMark(at+"b")},
		{"cut inside a character", "a" + strings.Repeat("é", 400), "a" + strings.Repeat("é", (maxAuditText-1-len(cutMark("a"+strings.Repeat("é", 400))))/2) + cutMark("a"+strings.Repeat("é", 400))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := auditText(tc.in)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len(got), maxAuditText)
			require.True(t, utf8.ValidString(got))
		})
	}
}

// FuzzAuditText: whatever a client sends, the kept text is valid UTF-8
// without control characters within the bound, the same text when it
// already was, and a prefix of the valid form of what was sent (quoted
// when it holds a control character) otherwise.
func FuzzAuditText(f *testing.F) {
	for _, s := range []string{"", "a", "\xff", strings.Repeat("é", 300), strings.Repeat("\xff", 600), strings.Repeat("a", 511) + "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := auditText(s)
		require.True(t, utf8.ValidString(got))
		require.LessOrEqual(t, len(got), maxAuditText)
		require.False(t, strings.ContainsFunc(got, isControlOrFormatting), "%q", got)
		if len(s) <= maxAuditText && utf8.ValidString(s) && !strings.ContainsFunc(s, isControlOrFormatting) {
			require.Equal(t, s, got)
			return
		}
		valid := strings.ToValidUTF8(s, "\uFFFD")
		if strings.ContainsFunc(valid, isControlOrFormatting) {
			valid = strconv.Quote(valid)
		}
		if len(valid) <= maxAuditText {
			require.Equal(t, valid, got)
			return
		}
		i := strings.LastIndex(got, "…(cut from ")
		require.Positive(t, i+1)
		require.True(t, strings.HasPrefix(valid, got[:i]))
	})
}

// BenchmarkBoundAuditText is the cost on an audit record: a refusal's,
// checked, and an accepted publish's, written for every message and left
// as it is.
func BenchmarkBoundAuditText(b *testing.B) {
	base := store.AuditRecord{Code: "OK", Subject: "payments.authorize", Principal: "spiffe://merchant-prod/ns/checkout/sa/checkout-api",
		ContractID: "ctr_cc3705f6ed6731bbdb9723403751f38343d6", PolicyID: "payments.authorize@v1", SchemaID: "payment.authorization.v1", MessageID: "msg_8rqn56rnc0o5hzrhx4yi"}
	for _, tc := range []struct {
		name string
		r    store.AuditRecord
	}{
		{"refusal", EventPublishDenied.record(OutcomeDeny, CodeSchemaInvalid, base)},
		{"accepted", EventPublishAccepted.record(OutcomeAllow, CodeOK, base)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				boundAuditText(&tc.r)
			}
		})
	}
}

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
