package jetstream

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
)

// TestClusterRecordsWatchStalledConfirmsNothing: node a's watch of the
// nodes' records (<P>_applied) stops delivering (its consumer paused on
// the NATS server, which goes on sending its heartbeats: no error for the
// client to see), while everything else a does with NATS works, its own
// record's writes included. Node c keeps its record fresh but has not
// applied a's revocation: it lags. Before, a's barrier saw c's record age
// in its stalled view and, once it looked older than Liveness, passed c
// over: the revocation was reported done although c had not applied it
// (and a node c that started during the stall was not waited for at all),
// and LiveNodes dropped to 1, a taking the whole cluster's share of every
// rate limit. Now a barrier confirms nothing until a's watch has
// delivered a write of a's own record made since the barrier began, and
// passes a node over only once that watch has delivered a write of a's
// record stored more than Liveness after the node's last: the revocation
// fails CLUSTER_UNCONFIRMED naming c, LiveNodes stays, and a's watch,
// whose own writes do not come back within Liveness, starts again, reads
// every record anew, and a retry is confirmed once c has applied the
// revocation.
func TestClusterRecordsWatchStalledConfirmsNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		known bool // c's record was written before a's watch stalled
	}{
		{"a node known before the stall", true},
		{"a node that starts during the stall", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			prefix := freshPrefix()
			const (
				inbox    = "_INBOX_a"
				liveness = 1500 * time.Millisecond
			)
			var aLog testlog.Buffer
			// a waits for c six times Liveness: a passing-over on the
			// strength of the stalled view (after Liveness) would answer
			// well before, and a's watch has started again (within
			// Liveness and a beat of the stall, and the engine's second)
			// well before, so that the failed wait names c.
			na := clusterEngine(ctx, t, connect(t, srv.ClientURL(), nats.CustomInboxPrefix(inbox)), &Options{Prefix: prefix, Node: "a", Memory: true, Liveness: liveness, BarrierTimeout: 6 * liveness}, func(o *pigeon.Options) {
				o.Logger = aLog.Logger()
			})
			a, s, cl := na.e, na.s, na.cl
			g := memberGrant(ctx, t, a)

			// Node c, on a connection of its own: its record is written
			// every quarter of Liveness with what it applied, every
			// change made so far.
			sc, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "c", Memory: true, Liveness: liveness})
			require.NoError(t, err)
			t.Cleanup(func() { _ = sc.Close(context.Background()) })
			records, err := sc.js.KeyValue(ctx, sc.bucketName("applied"))
			require.NoError(t, err)
			var cApplied atomic.Pointer[appliedRevs]
			applyAll := func() {
				t.Helper()
				dir, err := lastRevision(ctx, sc.kv)
				require.NoError(t, err)
				con, err := lastRevision(ctx, sc.contracts)
				require.NoError(t, err)
				cApplied.Store(&appliedRevs{Dir: dir, Con: con})
			}
			applyAll()
			cctx, cstop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() { cstop(); wg.Wait() }()
			startC := func() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					beat := time.NewTicker(liveness / 4)
					defer beat.Stop()
					for {
						b, _ := json.Marshal(cApplied.Load())
						_, _ = records.Put(cctx, token("c"), b)
						select {
						case <-cctx.Done():
							return
						case <-beat.C:
						}
					}
				}()
			}
			nodes := 1
			if tc.known {
				startC()
				nodes = 2
			}
			require.Eventually(t, func() bool { // a sees every node, each applied all
				bctx, bcancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer bcancel()
				return cl.LiveNodes() == nodes && cl.Barrier(bctx) == nil
			}, 10*time.Second, 10*time.Millisecond)

			pauseConsumers(ctx, t, s, inbox, "applied")
			if !tc.known {
				startC()
			}
			// Nothing changed, yet a barrier begun now is not confirmed:
			// a's watch delivers none of the records written since.
			bctx, bcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err = cl.Barrier(bctx)
			bcancel()
			require.ErrorContains(t, err, "this node's watch of the others' records is not delivering")

			// c has not applied the revocation: a waits for it, whatever
			// a's stalled view says, and fails naming it. Meanwhile
			// LiveNodes does not drop: no record aged in a's view is
			// taken for a node gone.
			revoked := make(chan error, 1)
			go func() { revoked <- a.RevokeGrant(ctx, g.JTI) }()
			require.Never(t, func() bool { return cl.LiveNodes() < nodes }, 2*liveness, 5*time.Millisecond,
				"LiveNodes dropped while a's watch of the records stalled")
			err = <-revoked
			requireCode(t, err, pigeon.CodeClusterUnconfirmed)
			require.ErrorContains(t, err, "nodes c did not confirm the change")
			require.Equal(t, 2, cl.LiveNodes())
			// a's watch, its own record's writes not coming back, started
			// again: the paused consumer is never resumed.
			requireLogged(t, &aLog, "has not delivered this node's own record")

			// Once c has applied the revocation, a retry is confirmed.
			applyAll()
			require.NoError(t, a.RevokeGrant(ctx, g.JTI))
			require.Equal(t, 2, cl.LiveNodes())
		})
	}
}
