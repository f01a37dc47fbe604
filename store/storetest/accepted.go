package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// testAccepted checks store.AcceptAppender with store.AuditChainer: an
// accepted message's record is in the chain once, with the fields given
// and the message's subject and id, beside records chained by
// ChainAudit; a duplicate keeps none; all of it survives a reopen.
func (su *suite) testAccepted(t *testing.T) {
	s := su.store(t)
	aa, ok := s.(store.AcceptAppender)
	if !ok {
		t.Skip("store has no AcceptAppender")
	}
	_, ok = s.(store.AuditChainer)
	require.True(t, ok, "an AcceptAppender chains records itself, so it must be an AuditChainer")
	ctx := t.Context()
	acc := store.AuditRecord{Type: "publish.accepted", Outcome: "allow", Code: "OK", Principal: "svc-checkout",
		ContractID: "ctr-1", PolicyID: "pol-1", SchemaID: "sch-1", Time: base}
	other := []store.AuditRecord{{Type: "contract.negotiated", Outcome: "allow", Time: at(1)}}

	steps := []struct {
		name    string
		do      func(t *testing.T) error
		dupOf   string
		records int // acceptance records expected after the step
	}{
		{name: "accepted", records: 1, do: func(t *testing.T) error {
			m := store.Message{Subject: "s", ID: "m1", Time: base, IdemKey: "k", IdemExpires: at(1e12), Body: []byte("{}")}
			got, dup, err := aa.AppendAccepted(ctx, m, acc)
			require.False(t, dup)
			require.Equal(t, uint64(1), got.Seq)
			return err
		}},
		{name: "chained by the store", records: 1, do: func(t *testing.T) error {
			recs := append([]store.AuditRecord(nil), other...)
			err := s.(store.AuditChainer).ChainAudit(ctx, recs)
			require.NotZero(t, recs[0].Seq)
			require.Equal(t, recs[0].ComputeHash(), recs[0].Hash)
			return err
		}},
		{name: "duplicate keeps no record", records: 1, do: func(t *testing.T) error {
			m := store.Message{Subject: "s", ID: "m2", Time: at(2), IdemKey: "k", IdemExpires: at(1e12), Body: []byte("{}")}
			got, dup, err := aa.AppendAccepted(ctx, m, acc)
			require.True(t, dup)
			require.Equal(t, "m1", got.ID)
			return err
		}},
		{name: "another subject", records: 2, do: func(t *testing.T) error {
			_, _, err := aa.AppendAccepted(ctx, store.Message{Subject: "t", ID: "m3", Time: at(3), Body: []byte("{}")}, acc)
			return err
		}},
	}
	check := func(t *testing.T, s store.Store, want int) {
		t.Helper()
		recs, err := s.ReadAudit(ctx, 0, 0)
		require.NoError(t, err)
		_, cp, err := s.AuditHead(ctx)
		require.NoError(t, err)
		require.NoError(t, store.VerifyChain(cp, recs))
		n := 0
		for _, r := range recs {
			if r.Type != acc.Type {
				continue
			}
			n++
			want := acc
			want.Seq, want.ID, want.PrevHash, want.Hash, want.Subject, want.MessageID = r.Seq, r.ID, r.PrevHash, r.Hash, r.Subject, r.MessageID
			want.Seqs = "1" // the message's sequence: each is the first of its subject
			require.Contains(t, []string{"s/m1", "t/m3"}, r.Subject+"/"+r.MessageID)
			require.True(t, want.Time.Equal(r.Time))
			want.Time = r.Time
			require.Equal(t, want, r)
		}
		require.Equal(t, want, n, "acceptance records")
	}
	for _, st := range steps {
		require.NoError(t, st.do(t), st.name)
		check(t, s, st.records)
	}
	if su.f.Reopen != nil {
		check(t, su.reopen(t, s), 2)
	}
}
