package wal

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A message trimmed by retention before its acceptance record reached the
// audit log (the flusher lets records gather for acceptLinger) must not
// take the record with it: after a crash, recovery finds a missing
// acceptance record only in the message's own record, which the trim
// removed. A publish answered "accepted" would then have no
// publish.accepted record at all.
func TestTrimKeepsUnchainedAcceptanceRecords(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir(), nil)
	ids := map[string]string{}
	for i := range 3 {
		m := msg("a", fmt.Sprint("m", i), base)
		_, _, err := s.AppendAccepted(ctx, m, acceptance("p-"+m.ID))
		require.NoError(t, err)
		ids[m.ID] = "a"
	}
	// At once, well within acceptLinger: the records are in the outbox.
	n, err := s.TrimThrough(ctx, "a", 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	dir := crashCopy(t, s)

	requireAccepted(t, open(t, dir, nil), ids)
}
