package ws_test

import (
	"testing"
	"time"

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
			defer ws.SetReadWait(50 * time.Millisecond)()
			v := newEnv(t, &tc.opts, bulkEvents)
			stuck, _ := holdReadPool(t, v)

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
