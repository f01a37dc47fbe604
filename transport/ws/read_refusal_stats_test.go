package ws_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// TestReadRefusalsCountAsRateLimited: Stats.RateLimited counts the frames
// refused RATE_LIMITED, and a replay or receive refused RATE_LIMITED
// because the read pool had no room for it (MaxReadBytesInFlight) or its
// principal's reads held their share (MaxReadBytesPerPrincipal) is one:
// it is counted there as well as in ReadsRefused. Before, it was counted
// only in ReadsRefused, so RateLimited read 0 while clients were answered
// RATE_LIMITED.
func TestReadRefusalsCountAsRateLimited(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ws.Options
	}{
		// One answer of 8 MiB and one reservation of 17 MiB do not both
		// fit; alice may take the whole pool.
		{"pool", ws.Options{MaxReadBytesInFlight: 20 << 20, MaxReadBytesPerPrincipal: -1, StallTimeout: time.Hour}},
		// Alice's share is one reservation of 17 MiB.
		{"share", ws.Options{MaxReadBytesInFlight: 48 << 20, StallTimeout: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			defer ws.SetReadWait(50 * time.Millisecond)()
			v := newEnv(t, &tc.opts, bulkEvents)
			p, err := v.e.Authenticate(ctx, "alice-token")
			require.NoError(t, err)
			k, err := v.e.Negotiate(ctx, p, "uk", []string{"bulk.events"}, 0)
			require.NoError(t, err)
			blob := strings.Repeat("x", 512<<10)
			for i := range 20 {
				_, err := v.e.Publish(ctx, pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}, &pigeon.Message{
					Type: "bulk", Subject: "bulk.events", Intent: "record", Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"blob":%q}`, i, blob))})
				require.NoError(t, err)
			}

			// A connection that sends replay after replay and never reads
			// the answers holds the bound.
			stuck := v.rawWith(t, &websocket.DialOptions{HTTPClient: smallReceiveBuffer(), HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
			stuck.negotiate("bulk.events")
			for i := range 40 {
				stuck.write(fmt.Sprintf(`{"op":"replay","id":"r%d","subject":"bulk.events","reason":"audit"}`, i))
			}
			eventually(t, func() bool { return v.srv.Stats().ReadsRefused > 0 }, "the stuck connection's replays reach the bound: %+v", v.srv.Stats())

			other := v.raw(t, "alice-token")
			other.negotiate("bulk.events")
			before := v.srv.Stats().RateLimited
			other.fail(ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":1`, pigeon.CodeRateLimited)
			other.fail(ws.OpReceive, `,"subject":"bulk.events","max":1`, pigeon.CodeRateLimited)
			require.GreaterOrEqual(t, v.srv.Stats().RateLimited, before+2, "each read refused RATE_LIMITED is counted: %+v", v.srv.Stats())

			// While every connection stays, each read refused for want of
			// room was refused RATE_LIMITED: the two counts meet once the
			// stuck connection's replays are all answered or held.
			eventually(t, func() bool {
				s := v.srv.Stats()
				return s.RateLimited == s.ReadsRefused
			}, "every read refused RATE_LIMITED is counted in RateLimited: %+v", v.srv.Stats())

			require.NoError(t, stuck.c.CloseNow())
			eventually(t, func() bool { return v.srv.Stats().ReadBytes == 0 }, "the stuck connection's reads give their room back: %+v", v.srv.Stats())
			s := v.srv.Stats()
			require.LessOrEqual(t, s.RateLimited, s.ReadsRefused, "a read whose connection ended while it waited is no RATE_LIMITED refusal: %+v", s)
		})
	}
}
