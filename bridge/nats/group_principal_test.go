package natsbridge

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/policy"
)

// The default group of an Out route, natsbridge.<route>, is a name any
// receiver of a work-queue subject can join, and each message it is handed
// there is one the bridge is not. Pigeon's consumer groups have no owner,
// so the bridge cannot keep them to itself by name; a filter that reads
// principal makes the group key the principal's (docs/delivery.md), and
// another principal that joins the group by name, with the same filter
// or none, competes in a group of its own. With that filter the route
// carries every message while another receiver sits in its group.
func TestBridgeGroupBoundToItsPrincipal(t *testing.T) {
	for _, filter := range []string{"", `principal.id != ""`} {
		t.Run("intruder filter "+strconv.Quote(filter), func(t *testing.T) {
			e := newEngine(t, withWorkQueue)
			ns := runNATS(t, -1, "")
			nc := connectNATS(t, ns.ClientURL(), 20*time.Millisecond)
			tc := connectNATS(t, ns.ClientURL(), 20*time.Millisecond)
			sub, err := tc.SubscribeSync("jobs.nats")
			require.NoError(t, err)
			require.NoError(t, tc.Flush())
			rb := start(t, Options{Dialer: transports[0].dialer(t, e), Credential: bridgeToken, NATS: nc, Routes: []Route{
				{Name: "jobs-out", Direction: Out, Subject: "jobs.wq", NATSSubject: "jobs.nats", Filter: `principal.id != ""`},
			}})
			s, err := e.Connect(t.Context(), monitorToken, []string{"jobs.wq"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			var stolen atomic.Int64
			opts := []pigeon.SubscribeOption{pigeon.WithGroup("natsbridge.jobs-out")}
			if filter != "" {
				opts = append(opts, pigeon.WithFilter(filter))
			}
			_, err = s.Subscribe(t.Context(), "jobs.wq", func(context.Context, *pigeon.Delivery) error { stolen.Add(1); return nil }, opts...)
			require.NoError(t, err)

			p, err := e.Connect(t.Context(), appToken, []string{"jobs.wq"})
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close(context.Background()) })
			const n = 20
			for i := range n {
				_, err := p.Publish(t.Context(), &pigeon.Message{Type: "job", Subject: "jobs.wq", Intent: "order_event", Data: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
				require.NoError(t, err)
			}
			for range n {
				_, err := sub.NextMsg(30 * time.Second)
				require.NoError(t, err, "the route carries every message (forwarded %d, other %d)", routeStats(rb.b, "jobs-out").Forwarded, stolen.Load())
			}
			require.Eventually(t, func() bool { return routeStats(rb.b, "jobs-out").Forwarded == n }, 30*time.Second, 5*time.Millisecond)
			require.Eventually(t, func() bool { return stolen.Load() == n }, 30*time.Second, 5*time.Millisecond,
				"the other receiver has a group of its own, with every message")
		})
	}
}

// withWorkQueue adds jobs.wq, a work-queue subject the app publishes and
// the bridge and the monitor receive.
func withWorkQueue(t testing.TB, cat *pigeon.Catalog) {
	sp, err := policy.ParseSubject("jobs.wq.json", []byte(strings.NewReplacer(
		`"name": "orders.events"`, `"name": "jobs.wq"`, `"mode": "pubsub"`, `"mode": "workQueue"`).Replace(ordersPolicy)))
	require.NoError(t, err)
	cat.Subjects = append(cat.Subjects, sp)
}
