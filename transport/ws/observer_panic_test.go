package ws_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// deliverPanics is an Observer that panics when told how long a delivery
// took; everything else it ignores.
type deliverPanics struct{}

func (deliverPanics) Audited(pigeon.AuditRecord) {}
func (deliverPanics) Took(s pigeon.Stage, _ string, _ time.Duration) {
	if s == pigeon.StageDeliver {
		panic("observer failed")
	}
}
func (deliverPanics) Committed(pigeon.CommitLog, int, time.Duration) {}
func (deliverPanics) Noted(pigeon.Note, string)                      {}

// TestObserverPanicOnAckOverWebSocket: an application's Observer that
// panics as the engine reports a delivery's latency changes nothing for
// the client: its ack is answered ok, the delivery is settled (the group
// has nothing left for the next consumer), and its connection, when the
// client leaves, is torn down and its slot freed. Before, the ack was
// answered INTERNAL and the connection closed with 1011, and its teardown
// waited for ever for the delivery to settle, holding the subscription,
// its lease and the connection's slot until the process ended.
func TestObserverPanicOnAckOverWebSocket(t *testing.T) {
	v := newEnv(t, nil, longAckWait, func(o *pigeon.Options) { o.Observer = deliverPanics{} })
	boss, crew, sub, _ := pushedJob(t, v)
	crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"job-1"`, ws.OpOK)
	require.NoError(t, crew.c.CloseNow())
	eventually(t, func() bool { return v.srv.Stats().Open == 1 }, "the connection is torn down: %d open", v.srv.Stats().Open)

	// The job was settled: the group's next consumer gets the next job,
	// not it again.
	other := v.raw(t, "crew-token")
	other.negotiate("jobs.run")
	other.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g"`, ws.OpSubscribed)
	boss.ok(ws.OpPublish, `,"message":`+jobJSON("job-2", 2), ws.OpDecision)
	d := other.push()
	require.Equal(t, ws.OpDeliver, d.Op)
	require.Equal(t, "job-2", decodeMsg(t, d.Message).ID)
}
