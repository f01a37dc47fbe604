package natsbridge

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Pigeon ids that differ only in white space at an end are distinct
// messages; a NATS header would carry them as one Nats-Msg-Id (nats.go
// trims header values), and the stream would drop all but the first as
// duplicates of it.
func TestOutJetStreamIDsWithEdgeSpaces(t *testing.T) {
	v := newEnv(t)
	st := v.stream(t, "ORDERS", "bridge.orders")
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders", JetStream: true, Stream: "ORDERS"},
	}})
	pub := publisher(t, v.e)
	// The last would be the Nats-Msg-Id of " order-42" were it sent as it is.
	ids := []string{"order-42", "order-42 ", " order-42", "b64:IG9yZGVyLTQy"}
	for i, id := range ids {
		m := order("o-" + id)
		m.ID = id
		res, err := pub.Publish(t.Context(), m)
		require.NoError(t, err)
		require.Equal(t, id, res.Message.ID, "message %d", i)
	}
	require.Eventually(t, func() bool {
		s := routeStats(rb.b, "orders-out")
		return s.Forwarded+s.Retried >= uint64(len(ids))
	}, 30*time.Second, 5*time.Millisecond)
	s := routeStats(rb.b, "orders-out")
	require.Zero(t, s.Duplicates, "distinct Pigeon messages taken for duplicates by the stream")
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, len(ids), info.State.Msgs)
	seen := map[string]bool{}
	for seq := uint64(1); seq <= uint64(len(ids)); seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		seen[m.Header.Get(HeaderMsgID)] = true
	}
	require.Len(t, seen, len(ids), "one Nats-Msg-Id per Pigeon id")
	require.True(t, seen["order-42"], "an id a header keeps is sent as it is")
}
