package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTrimAuditContendedIsBounded: TrimAuditBefore started again at once,
// for ever, whenever its write of the node's checkpoint found it moved
// since it read it (a second process given the node's name trimming, or
// rewriting the checkpoint, between the read and the write): under such
// contention it spun, and the retention sweep with it. It now retries as
// ChainAudit does (casRetryN): a pause growing and jittered between
// tries, at most auditTrimTries tries, then a *ContendedError
// (ErrContended), or the context's error when ctx ends, nothing purged
// and the chain whole; a trim that wins after losing some tries trims.
func TestTrimAuditContendedIsBounded(t *testing.T) {
	for _, tc := range contendedCases {
		t.Run(tc.name, func(t *testing.T) {
			a, a2 := twins(t)
			recs := chainBatches(t, a, []int{1}, []int{2}, []int{3}, []int{4})
			// A first trim writes the checkpoint the other writer rewrites.
			n, err := a.TrimAuditBefore(t.Context(), t0.Add(2*time.Second))
			require.NoError(t, err)
			require.Equal(t, 1, n)

			// The deadline only ends a spinning call; a bounded one is done
			// well before it.
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			tries := 0
			a.auditTrimRaced = func() {
				tries++
				if tries > tc.races {
					return
				}
				// The other process rewrites the checkpoint: same value,
				// a new revision.
				e, err := a2.auditCP.Get(t.Context(), "a")
				require.NoError(t, err)
				_, err = a2.auditCP.Put(t.Context(), "a", e.Value())
				require.NoError(t, err)
				if tc.cancel && tries == 3 {
					cancel()
				}
			}
			n, err = a.TrimAuditBefore(ctx, t0.Add(3*time.Second))
			reports, verr := VerifyAudit(t.Context(), a.nc, a.opts.Prefix)
			require.NoError(t, verr)
			require.NoError(t, reports[0].Err, "the chain stays whole")
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, 1, n)
				require.Equal(t, tc.races+1, tries)
				requireAuditState(t, a, auditState{cp: cpOf(recs[1]), recs: recs[2:], msgs: 2})
				return
			}
			var ce *ContendedError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tries, ce.Tries)
			require.Equal(t, a.bucketName(auditBucket), ce.Bucket)
			require.Equal(t, "a", ce.Key)
			if !tc.cancel {
				require.Equal(t, auditTrimTries, ce.Tries)
			}
			require.Equal(t, 0, n)
			requireAuditState(t, a, auditState{cp: cpOf(recs[0]), recs: recs[1:], msgs: 3})
		})
	}
}
