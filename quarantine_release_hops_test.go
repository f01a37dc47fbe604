package pigeon_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A quarantined message keeps the depth it was published at (how many
// programs deep it is, Message.Hops) through its release: the release
// re-published it at the releaser's depth, 0, so a program's message that
// a gate quarantined and an operator released started its lineage again,
// and a loop of programs through a quarantine went on past
// programs.Options.MaxHops, one release at a time.
func TestReleaseKeepsTheMessagesHops(t *testing.T) {
	for _, hops := range []uint32{0, 1, 3, 1<<32 - 1} {
		t.Run(strconv.FormatUint(uint64(hops), 10), func(t *testing.T) { releaseAtDepth(t, hops) })
	}
}

// releaseAtDepth quarantines a message published hops deep and
// releases it.
func releaseAtDepth(t *testing.T, hops uint32) {
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Catalog.Subjects = append(o.Catalog.Subjects, reviewedOrders())
	})
	// dave publishes as a program would, hops deep; the Hops the message
	// itself holds is not the broker's, and neither kept nor released.
	c := f.connect("dave-token", "orders.place").(interface{ Caller() pigeon.Caller }).Caller()
	c.Hops = hops
	_, err := f.e.Publish(ctx, c, &pigeon.Message{Type: "order", Intent: "place", Subject: "orders.place", Hops: 77, Data: json.RawMessage(`{"amount":500}`)})
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	qid := pe.Details["quarantineId"].(string)
	rec, err := f.e.QuarantineRecord(ctx, qid)
	require.NoError(t, err)
	require.Equal(t, hops, rec.Message.Hops, "the quarantined copy")

	carol := f.connect("carol-token", "orders.place").(interface{ Caller() pigeon.Caller }).Caller()
	res, err := f.e.ReleaseQuarantine(ctx, carol, qid)
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.Equal(t, hops, res.Message.Hops, "released at depth %d", hops)
	back, err := pigeon.DecodeMessage(res.AppendMessageJSON(nil))
	require.NoError(t, err)
	require.Equal(t, hops, back.Hops, "the text subscribers get")
}
