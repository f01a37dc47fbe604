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
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

// bulkEvents adds bulk.events, a pubsub subject alice publishes, receives
// and replays (and bob receives and replays), and reads of at most 8 MiB.
func bulkEvents(o *pigeon.Options) {
	allow := []pigeon.RuleSpec{{Effect: "allow", Principals: []string{transporttest.Alice}}}
	readers := []pigeon.RuleSpec{{Effect: "allow", Principals: []string{transporttest.Alice, transporttest.Bob}}}
	o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
		Name: "bulk.events", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
		Replay: pigeon.ReplayPolicy{Allowed: true},
		Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: allow, pigeon.OpReceive: readers, pigeon.OpReplay: readers},
	})
	o.MaxReadBytes = 8 << 20
	o.NegotiateRate.PerSecond = -1
}

// TestReadsInFlightAreBoundedOverWebSocket: a connection that sends replay
// after replay and never reads the answers holds at most the server's read
// pool (not MaxInFlight answers of MaxReadBytes each); while it does, a
// replay on another connection waits and is answered RATE_LIMITED; once
// the stuck connection is gone, replays are served in full.
func TestReadsInFlightAreBoundedOverWebSocket(t *testing.T) {
	defer ws.SetReadWait(50 * time.Millisecond)()
	const pool = 20 << 20 // one answer of 8 MiB and one reservation of 17 MiB do not both fit
	v := newEnv(t, &ws.Options{MaxReadBytesInFlight: pool, StallTimeout: time.Hour}, bulkEvents)
	stuck, _ := holdReadPool(t, v)
	require.LessOrEqual(t, v.srv.Stats().ReadBytes, int64(pool), "the reads hold at most the pool")

	other := v.raw(t, "alice-token")
	other.negotiate("bulk.events")
	other.fail(ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":1`, pigeon.CodeRateLimited)
	require.LessOrEqual(t, v.srv.Stats().ReadBytes, int64(pool))

	require.NoError(t, stuck.c.CloseNow())
	eventually(t, func() bool { return v.srv.Stats().ReadBytes == 0 }, "the stuck connection's reads give their room back: %+v", v.srv.Stats())
	f := other.ok(ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":2`, ws.OpMessages)
	require.Len(t, f.Messages, 2)
	// The answer's room is given back once it is written, which the client
	// may see before the server has done it.
	eventually(t, func() bool { return v.srv.Stats().ReadBytes == 0 }, "the answered replay gives its room back: %+v", v.srv.Stats())
}

// TestReadsInFlightAreSharedFairlyOverWebSocket: a principal whose
// connection sends replay after replay and never reads the answers holds
// at most its share of the read pool (a quarter, here one reservation),
// not the pool: its replays beyond it, on that connection or another, are
// answered RATE_LIMITED naming MaxReadBytesPerPrincipal, while another
// principal's replay is served in full meanwhile.
func TestReadsInFlightAreSharedFairlyOverWebSocket(t *testing.T) {
	defer ws.SetReadWait(50 * time.Millisecond)()
	// Each replay reserves 2×8 MiB and 1 MiB, alice's whole share, and
	// keeps its answer of about 8 MiB until it is queued; without shares,
	// the stuck connection's answers would fill the pool.
	const pool, share = 48 << 20, 17 << 20
	v := newEnv(t, &ws.Options{MaxReadBytesInFlight: pool, StallTimeout: time.Hour}, bulkEvents)
	stuck, _ := holdReadPool(t, v)
	require.LessOrEqual(t, v.srv.Stats().ReadBytes, int64(share), "alice holds at most her share")

	again := v.raw(t, "alice-token")
	again.negotiate("bulk.events")
	f := again.fail(ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":1`, pigeon.CodeRateLimited)
	require.Contains(t, f.Error.Message, "MaxReadBytesPerPrincipal", "the refusal names the share")

	bob := v.raw(t, "bob-token")
	bob.negotiate("bulk.events")
	f = bob.ok(ws.OpReplay, `,"subject":"bulk.events","reason":"audit"`, ws.OpMessages)
	require.Len(t, f.Messages, 15, "bob reads while alice is stuck")
	require.LessOrEqual(t, v.srv.Stats().ReadBytes, int64(share))

	require.NoError(t, stuck.c.CloseNow())
	eventually(t, func() bool { return v.srv.Stats().ReadBytes == 0 }, "the stuck connection's reads give their room back: %+v", v.srv.Stats())
	f = again.ok(ws.OpReplay, `,"subject":"bulk.events","reason":"audit","max":2`, ws.OpMessages)
	require.Len(t, f.Messages, 2)
}

// holdReadPool publishes twenty messages of 512 KiB on bulk.events, as
// alice, and opens a connection of alice's that sends replay after replay
// of them and never reads the answers, until its reads hold the server's
// read pool (or alice's share of it): a read has been refused. It returns
// that connection and its contract.
func holdReadPool(t *testing.T, v *env) (*rawClient, pigeon.ContractInfo) {
	t.Helper()
	ctx := context.Background()
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
	stuck := v.rawWith(t, &websocket.DialOptions{HTTPClient: smallReceiveBuffer(), HTTPHeader: http.Header{"Authorization": {"Bearer alice-token"}}})
	contract := stuck.negotiate("bulk.events")
	for i := range 40 {
		stuck.write(fmt.Sprintf(`{"op":"replay","id":"r%d","subject":"bulk.events","reason":"audit"}`, i))
	}
	eventually(t, func() bool { return v.srv.Stats().ReadsRefused > 0 }, "the stuck connection's replays reach the bound (the pool, or alice's share): %+v", v.srv.Stats())
	return stuck, contract
}
