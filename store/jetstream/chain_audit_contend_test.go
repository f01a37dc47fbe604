package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// TestChainAuditContendedIsBounded: ChainAudit tried again at once, for
// ever, whenever another writer of the node's chain (a second process
// given the node's name) published between its read of the head and its
// own publish: under such contention it spun, and the auditor, which
// calls it with a context that never ends, with it. It now pauses between
// tries (jittered, growing, as contended compare-and-set writes do) and
// gives up after chainTries with a *ContendedError (ErrContended), or
// when ctx ends (the context's error), nothing of its batch chained; a
// batch that wins after losing some tries is chained after the winners'.
func TestChainAuditContendedIsBounded(t *testing.T) {
	for _, tc := range contendedCases {
		t.Run(tc.name, func(t *testing.T) {
			a, a2 := twins(t)
			// The deadline only ends a spinning call; a bounded one is done
			// well before it.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			tries := 0
			var other []store.AuditRecord // the other writer's records
			a.chainRaced = func() {
				tries++
				if tries > tc.races {
					return
				}
				recs := []store.AuditRecord{{Type: "other", Time: time.Now()}}
				require.NoError(t, a2.ChainAudit(t.Context(), recs))
				other = append(other, recs...)
				if tc.cancel && tries == 3 {
					cancel()
				}
			}
			recs := []store.AuditRecord{{Type: "mine", Time: time.Now()}, {Type: "mine2", Time: time.Now()}}
			err := a.ChainAudit(ctx, recs)
			got, rerr := a2.ReadAudit(t.Context(), 0, 0)
			require.NoError(t, rerr)
			reports, verr := VerifyAudit(t.Context(), a.nc, a.opts.Prefix)
			require.NoError(t, verr)
			require.NoError(t, reports[0].Err, "the chain stays whole")
			if tc.want == nil {
				require.NoError(t, err)
				require.Equal(t, tc.races+1, tries)
				require.Equal(t, append(other, recs...), got, "chained after the winners")
				return
			}
			var ce *ContendedError
			require.ErrorAs(t, err, &ce)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, tries, ce.Tries)
			require.Equal(t, a.auditStream("a"), ce.Bucket)
			if !tc.cancel {
				require.Equal(t, chainTries, ce.Tries)
			}
			require.Equal(t, other, got, "none of the batch is chained")
		})
	}
}
