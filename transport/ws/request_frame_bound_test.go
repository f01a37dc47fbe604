package ws_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/transport/ws"
)

// TestWaitingRequestsCountTheirWholeFrame: a request waiting for its reply
// holds every member of its frame that decoded, not only its message's
// data, for up to MaxRequestTimeout. Only the data and 4 KiB were counted
// toward MaxRequestBytesPerPrincipal, so a request whose other members (a
// selector, subjects, message ids: members of other ops, which
// encoding/json decodes all the same; or, before MaxFrameID, its id)
// filled the frame counted 4 KiB and held up to the frame size: the 64 MiB
// of a principal let it pin 16,384 frames, 16 GiB on the default 1 MiB
// frame. Each request now counts its frame.
func TestWaitingRequestsCountTheirWholeFrame(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	for _, tc := range []struct {
		name, id, extra string // id: at most ws.MaxFrameID bytes
	}{
		{"a member a request does not use", "r1", `,"selector":"` + big + `"`},
		{"members of another op", "r1", `,"subjects":["` + big + `"],"messageIds":["` + big + `"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, &ws.Options{MaxRequestBytesPerPrincipal: 64 << 10, MaxFrame: 1 << 20})
			gateway := v.raw(t, "gateway-token")
			gateway.negotiate("payments.authorize")
			gateway.ok(ws.OpSubscribe, `,"subject":"payments.authorize"`, ws.OpSubscribed)

			a := v.raw(t, "checkout-token")
			a.negotiate("payments.authorize")
			a.write(`{"op":"request","id":"` + tc.id + `","timeoutMs":60000` + tc.extra + `,"message":` + msgJSON(t, demo.Payment("o-1")) + `}`)
			a.ok(ws.OpPing, "", ws.OpPong) // the server read it before the ping
			gateway.push()                 // it waits for its reply

			b := v.raw(t, "checkout-token")
			b.negotiate("payments.authorize")
			f := b.fail(ws.OpRequest, `,"timeoutMs":50,"message":`+msgJSON(t, demo.Payment("o-2")), pigeon.CodeRateLimited)
			require.Contains(t, f.Error.Message, "MaxRequestBytesPerPrincipal")
		})
	}
}
