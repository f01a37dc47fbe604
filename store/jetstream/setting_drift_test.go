package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestSettingChangedWhileRunningReported: Open refuses a stream or bucket
// another tool changed so that it would drop records behind the broker's
// back (a per-subject limit, a max age, a message or byte limit), but a
// change made while the broker runs went unseen until the next start:
// the audit chain's batches, messages, contracts dropped silently
// meanwhile. The retention sweep's calls (message, audit, quarantine and
// contract trims) look again, at most once a minute for the buckets and
// the audit stream, at no cost for a message stream, whose configuration
// a trim reads anyway, and fail naming the change, which the broker logs.
func TestSettingChangedWhileRunningReported(t *testing.T) {
	srv := runServer(t)
	nc := connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		stream func(s *Store) string
		change func(cfg *jetstream.StreamConfig)
		trim   func(t *testing.T, s *Store) error
		reason string
	}{
		"audit stream, a per-subject limit": {
			stream: func(s *Store) string { return s.auditStream("node") },
			change: func(cfg *jetstream.StreamConfig) { cfg.MaxMsgsPerSubject = 1 },
			trim: func(t *testing.T, s *Store) error {
				_, err := s.TrimAuditBefore(t.Context(), time.Now())
				return err
			},
			reason: "per subject",
		},
		"message stream, a max age": {
			stream: func(s *Store) string { return s.msgStream("orders") },
			change: func(cfg *jetstream.StreamConfig) { cfg.MaxAge = time.Hour },
			trim: func(t *testing.T, s *Store) error {
				_, err := s.TrimThrough(t.Context(), "orders", 1)
				return err
			},
			reason: "max age",
		},
		"contracts bucket, a max age": {
			stream: func(s *Store) string { return "KV_" + s.bucketName("contracts") },
			change: func(cfg *jetstream.StreamConfig) { cfg.MaxAge = time.Hour },
			trim: func(t *testing.T, s *Store) error {
				_, err := s.DeleteExpiredContracts(t.Context(), time.Now())
				return err
			},
			reason: "max age",
		},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s, err := Open(ctx, nc, &Options{Prefix: freshPrefix(), Memory: true})
			require.NoError(t, err)
			now := time.Now().UTC()
			_, _, err = s.Append(ctx, store.Message{Subject: "orders", ID: "m1", Time: now})
			require.NoError(t, err)
			_, _, err = s.Append(ctx, store.Message{Subject: "orders", ID: "m2", Time: now})
			require.NoError(t, err)
			require.NoError(t, s.ChainAudit(ctx, []store.AuditRecord{{Time: now.Add(-time.Hour), Type: "e"}}))
			require.NoError(t, tc.trim(t, s), "unchanged, the trim runs")
			s.rechecked.Store(0) // a minute has passed

			st, err := js.Stream(ctx, tc.stream(s))
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			tc.change(&cfg)
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)

			err = tc.trim(t, s)
			require.Error(t, err, "the change went unseen")
			require.Contains(t, err.Error(), tc.stream(s))
			require.Contains(t, err.Error(), tc.reason)
		})
	}
}
