package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestExpiredContractRenewedAfterListingStays: DeleteExpiredContracts
// lists every contract, then purges those it judged expired. A contract
// renewed between the two (by another node, or this one) was purged by
// its key all the same: the listed value was stale, and the renewal was
// lost, the contract gone from every node that loads it afterwards. Only
// the revision judged expired may be purged; a renewal written since
// stays.
func TestExpiredContractRenewedAfterListingStays(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	now := time.Now().UTC()
	old := store.ContractRecord{ID: "c1", ExpiresAt: now.Add(-time.Hour)}
	require.NoError(t, s.PutContract(ctx, old))
	require.NoError(t, s.PutContract(ctx, store.ContractRecord{ID: "c2", ExpiresAt: now.Add(-time.Hour)}))

	listed, err := s.contractEntries(ctx)
	require.NoError(t, err)
	renewed := old
	renewed.ExpiresAt = now.Add(time.Hour)
	require.NoError(t, s.PutContract(ctx, renewed), "renewed after the listing")

	n, err := s.purgeExpired(ctx, listed, now)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the contract still expired is purged")
	got, err := s.GetContract(ctx, "c1")
	require.NoError(t, err, "the renewed contract was purged by its stale listing")
	require.True(t, got.ExpiresAt.Equal(renewed.ExpiresAt))
	_, err = s.GetContract(ctx, "c2")
	require.ErrorIs(t, err, store.ErrNotFound)

	// Renewed again: a later sweep keeps it, and purges it once expired.
	n, err = s.DeleteExpiredContracts(ctx, now)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = s.DeleteExpiredContracts(ctx, now.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = s.GetContract(ctx, "c1")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestQuarantineRequarantinedAfterListingStays: TrimQuarantineBefore has
// the same two steps; a record written again under its id after the
// listing (the id quarantined anew, with a new time) was purged by the
// stale value. Only the revision judged old is removed.
func TestQuarantineRequarantinedAfterListingStays(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true})
	require.NoError(t, err)
	now := time.Now().UTC()
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q1", Time: now.Add(-time.Hour)}))
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q2", Time: now.Add(-time.Hour)}))

	listed, err := s.entries(ctx, s.quarantine)
	require.NoError(t, err)
	require.NoError(t, s.PutQuarantine(ctx, store.QuarantineRecord{ID: "q1", Time: now}), "quarantined anew after the listing")

	n, err := s.purgeQuarantined(ctx, listed, now.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := s.GetQuarantine(ctx, "q1")
	require.NoError(t, err, "the record written since the listing was purged")
	require.True(t, got.Time.Equal(now))
	_, err = s.GetQuarantine(ctx, "q2")
	require.ErrorIs(t, err, store.ErrNotFound)
}
