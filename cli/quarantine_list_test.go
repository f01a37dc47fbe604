package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestQuarantineListPagesThrough: quarantine list prints every record
// once, oldest first, asking page after page when the server's read
// budget holds one record a page; a since with a zone offset (a "+" in
// the query) is sent escaped.
func TestQuarantineListPagesThrough(t *testing.T) {
	ctx := context.Background()
	e, hs := demoServer(t, func(o *pigeon.Options) { o.MaxReadBytes = 1 })
	c := demoCaller(t, e, "orders-token", "notifications.send")
	var want []string
	for _, key := range []string{"k-1", "k-2", "k-3"} {
		m := demo.Notification(key)
		m.Data = json.RawMessage(`{"recipientId":"c","channel":"sms","templateId":"t","recipient":{"ssn":"078-05-1120"}}`)
		_, err := e.Publish(ctx, c, m)
		var pe *pigeon.Error
		require.ErrorAs(t, err, &pe)
		want = append(want, pe.Details["quarantineId"].(string))
	}
	recs, err := e.Quarantine(ctx, time.Time{}, 0)
	require.NoError(t, err)
	require.Len(t, recs, 1, "the server's pages hold one record")
	all, err := e.QuarantinePage(ctx, pigeon.QuarantineQuery{})
	require.NoError(t, err)
	require.Len(t, all, 1)

	a := &api{hc: http.DefaultClient, url: hs.URL, token: "auditor-token"}
	for _, since := range []string{"", recs[0].Time.In(time.FixedZone("", 3600)).Format(time.RFC3339Nano)} {
		var out strings.Builder
		_, err := quarantineListing{since: since}.list(ctx, a, &out)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		var got []string
		for _, l := range lines {
			var r struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(l), &r))
			got = append(got, r.ID)
		}
		require.ElementsMatch(t, want, got, "since %q: every record once", since)
		require.Len(t, got, 3)
	}
}
