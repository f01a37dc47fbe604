package wal

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestRevokedContractRecordAfterIt: a contract record not revoked that the
// meta log holds after the revocation (a put that looked before the
// revocation committed, so PutContract's own look let it through) leaves
// the contract revoked when it commits and when Open replays it, from the
// log alone or from a snapshot that holds the revocation.
func TestRevokedContractRecordAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool // the revocation compacted into meta.snapshot
	}{{"log", false}, {"snapshot then log", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			s, err := Open(dir, nil)
			require.NoError(t, err)
			now := time.Now().UTC()
			revoked := store.ContractRecord{ID: "c1", Principal: "p", IssuedAt: now, ExpiresAt: now.Add(time.Hour),
				Revoked: true, Body: []byte(`{"v":1}`)}
			require.NoError(t, s.PutContract(ctx, revoked))
			if tc.snapshot {
				require.NoError(t, s.compactMeta())
			}
			renewed := revoked
			renewed.Revoked, renewed.ExpiresAt, renewed.Body = false, now.Add(3*time.Hour), []byte(`{"v":2}`)
			_, err = s.metaWrite(encodeContract(&renewed))
			require.NoError(t, err)

			requireRevoked := func(s *Store, msg string) {
				t.Helper()
				got, err := s.GetContract(ctx, "c1")
				require.NoError(t, err)
				require.Equal(t, revoked, got, msg)
			}
			requireRevoked(s, "the record committed after the revocation")
			require.NoError(t, s.Close(ctx))
			s, err = Open(dir, nil)
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close(ctx)) }()
			requireRevoked(s, "the record replayed after the revocation")
		})
	}
}
