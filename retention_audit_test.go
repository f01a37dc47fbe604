package pigeon_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// Retention that removes audit records or quarantine records leaves its
// own record in the chain: without one, a policy whose auditMs is a
// millisecond wiped the audit log at the next sweep, and expired
// quarantine records went, with nothing in the evidence saying when, how
// many, or where the remaining chain starts.
func TestRetentionOfAuditAndQuarantineIsAudited(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e, st := openDurable(t, dir, clk.Now, func(o *pigeon.Options) {
		for i := range o.Catalog.Subjects {
			o.Catalog.Subjects[i].Retention.AuditMs = time.Hour.Milliseconds()
		}
		o.QuarantineRetention = time.Hour
	})
	defer closeDurable(t, e, st)

	checkout, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	leaky := demo.Payment("o-2")
	leaky.Region = "us"
	_, err = checkout.Publish(ctx, leaky)
	requireCode(t, err, pigeon.CodeRegionDenied)
	before, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)

	clk.Advance(2 * time.Hour)
	e.EnforceRetention(ctx)

	_, cp, err := st.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, before[len(before)-1].Seq, cp.Seq, "every record older than an hour went")
	trimmed := auditOf(t, e, pigeon.Event("retention.audit"))
	require.Len(t, trimmed, 1, "the audit log's own trim is on the record")
	require.Equal(t, strconv.Itoa(len(before))+" records through "+strconv.FormatUint(cp.Seq, 10)+" (hash "+cp.Hash+")", trimmed[0].Ref)

	quar := auditOf(t, e, pigeon.Event("retention.quarantine"))
	require.Len(t, quar, 1, "the quarantine's trim is on the record")
	require.Equal(t, "1", quar[0].Ref)
	recs, err := e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Empty(t, recs)

	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}
