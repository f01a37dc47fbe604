package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestChainAudit chains batches onto the head, also when another writer
// of the same chain got there first, and VerifyAudit finds a removed
// record.
func TestChainAudit(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	prefix := freshPrefix()
	ctx := t.Context()
	a, err := Open(ctx, nc, &Options{Prefix: prefix, Node: "a"})
	require.NoError(t, err)
	a2, err := Open(ctx, nc, &Options{Prefix: prefix, Node: "a"}) // a second writer of chain a
	require.NoError(t, err)
	b, err := Open(ctx, nc, &Options{Prefix: prefix, Node: "b"})
	require.NoError(t, err)
	rec := func(typ string) []store.AuditRecord {
		return []store.AuditRecord{{Type: typ, Time: time.Now()}, {Type: typ + "2", Time: time.Now()}}
	}
	for _, w := range []*Store{a, a2, a, b} {
		recs := rec("x")
		require.NoError(t, w.ChainAudit(ctx, recs))
		require.Equal(t, recs[0].Hash, recs[1].PrevHash)
	}
	got, err := a.ReadAudit(ctx, 3, 0)
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, uint64(3), got[0].Seq)

	reports, err := VerifyAudit(ctx, nc, prefix)
	require.NoError(t, err)
	require.Equal(t, []ChainReport{
		{Node: "a", Records: 6, Head: store.Checkpoint{Seq: 6, Hash: got[3].Hash}},
		{Node: "b", Records: 2, Head: reports[1].Head},
	}, reports)

	// Someone deletes the second batch: the chain of a reports the gap.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, prefix+"_A_a")
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(ctx, 2))
	reports, err = VerifyAudit(ctx, nc, prefix)
	require.NoError(t, err)
	var ce *store.ChainError
	require.ErrorAs(t, reports[0].Err, &ce)
	require.Equal(t, uint64(5), ce.Seq)
	require.NoError(t, reports[1].Err)

	// Someone appends a forged record to b's chain, hash recomputed: its
	// prevHash does not match.
	forged := store.AuditRecord{Seq: 3, ID: "aud_3", Type: "publish.accepted", Time: time.Now().UTC(), PrevHash: store.Genesis}
	forged.Hash = forged.ComputeHash()
	require.NoError(t, b.publishAudit(ctx, []store.AuditRecord{forged}, 1))
	reports, err = VerifyAudit(ctx, nc, prefix)
	require.NoError(t, err)
	require.ErrorAs(t, reports[1].Err, &ce)
	require.Equal(t, uint64(3), ce.Seq)
	require.Equal(t, uint64(2), reports[1].Records)
}

// A record given to AppendAudit in another zone is stored in UTC: the
// hash covers the instant alone, and a verifier refuses a stored record
// whose time is in any zone but UTC (the zone is not hashed, so it could
// be rewritten unseen).
func TestAppendAuditKeepsTimesInUTC(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	ctx := t.Context()
	prefix := freshPrefix()
	s, err := Open(ctx, nc, &Options{Prefix: prefix, Node: "a"})
	require.NoError(t, err)
	r := store.AuditRecord{Seq: 1, ID: "aud_1", Type: "publish.accepted",
		Time: time.Date(2026, 12, 4, 23, 30, 0, 0, time.FixedZone("EST", -5*3600)), PrevHash: store.Genesis}
	r.Hash = r.ComputeHash()
	require.NoError(t, s.AppendAudit(ctx, r))
	got, err := s.ReadAudit(ctx, 1, 0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Same(t, time.UTC, got[0].Time.Location())
	require.True(t, got[0].Time.Equal(r.Time))
	reports, err := VerifyAudit(ctx, nc, prefix)
	require.NoError(t, err)
	require.Len(t, reports, 1)
	require.NoError(t, reports[0].Err)
}
