package pigeon_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
)

// TestAuditTextIsBounded: what a client chooses reaches the audit log
// bounded and as valid UTF-8, whatever it sent: a refusal of a 200 kB
// subject, message id or contract id writes at most 512 bytes of each,
// and a field with invalid UTF-8 is kept with U+FFFD in its place. The
// chain verifies in the engine and, as an auditor reads it, after a JSON
// round trip (which cannot carry invalid UTF-8).
func TestAuditTextIsBounded(t *testing.T) {
	f := newFixture(t)
	s := f.connect("checkout-token", "payments.authorize")
	huge := strings.Repeat("x", 200_000)
	for _, mut := range []func(*pigeon.Message){
		func(m *pigeon.Message) { m.Subject = huge },
		func(m *pigeon.Message) { m.ID = huge },
		func(m *pigeon.Message) { m.ID = "id\xff" },
		func(m *pigeon.Message) { m.Subject = "payments.\xffauthorize" },
	} {
		m := demo.Payment("o")
		mut(m)
		_, err := s.Publish(ctx, m)
		require.Error(t, err)
		f.clock.Advance(2 * time.Second) // each its own run
	}
	p, err := f.e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	_, err = f.e.Publish(ctx, pigeon.Caller{Principal: p, Region: "uk", ContractID: huge + "\xff"}, demo.Payment("o"))
	require.Error(t, err)

	recs, err := f.e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	denied := 0
	for _, r := range recs {
		for _, v := range []string{r.Subject, r.MessageID, r.ContractID, r.Ref, r.Principal} {
			require.LessOrEqual(t, len(v), 512, "%s record", r.Type)
			require.True(t, utf8.ValidString(v), "%s record", r.Type)
		}
		if r.Type == string(pigeon.EventPublishDenied) {
			denied++
		}
	}
	require.Equal(t, 5, denied)
	byType := auditOf(t, f.e, pigeon.EventPublishDenied)
	require.Contains(t, byType[0].Subject, "…(cut from 200000 bytes, sha256 ")
	require.Contains(t, byType[1].MessageID, "…(cut from 200000 bytes, sha256 ")
	require.Equal(t, "id\uFFFD", byType[2].MessageID)
	require.Equal(t, "payments.\uFFFDauthorize", byType[3].Subject)
	require.Contains(t, byType[4].ContractID, "…(cut from 200001 bytes, sha256 ")

	_, err = f.e.VerifyAudit(ctx)
	require.NoError(t, err)
	raw, err := json.Marshal(recs)
	require.NoError(t, err)
	var exported []store.AuditRecord
	require.NoError(t, json.Unmarshal(raw, &exported))
	require.NoError(t, store.VerifyChain(store.Checkpoint{Hash: store.Genesis}, exported), "the JSON export verifies")
}
