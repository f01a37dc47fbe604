package natsbridge

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A JetStream Out route resumes across restarts of the bridge: the last
// message the stream holds from the route names the last Pigeon sequence
// it took, and the next bridge starts after it. What was published while
// no bridge ran is carried, in order, once, and nothing is sent twice: in
// process with the stream named, and over WebSocket with the stream found
// by subject and read through the direct-get API.
func TestOutJetStreamResumesAcrossRestarts(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tr     int
		named  bool
		direct bool
	}{
		{"inproc/named", 0, true, false},
		{"ws/by-subject/direct", 1, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st, err := v.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.orders"}, AllowDirect: tt.direct})
			require.NoError(t, err)
			route := Route{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true}
			if tt.named {
				route.Stream = "OUT"
			}
			opts := Options{Dialer: transports[tt.tr].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{route}}
			pub := publisher(t, v.e)
			var ids []string
			publish := func(n int) {
				for range n {
					res, err := pub.Publish(t.Context(), order("o-"+strconv.Itoa(len(ids))))
					require.NoError(t, err)
					ids = append(ids, res.Message.ID)
				}
			}
			stored := func(n int) {
				require.Eventually(t, func() bool {
					info, err := st.Info(t.Context())
					require.NoError(t, err)
					return info.State.Msgs == uint64(n)
				}, 30*time.Second, 5*time.Millisecond, "the stream holds %d messages", n)
			}

			// Each bridge carries what is published while it runs, then
			// stops; what is published before the next one starts must
			// not be skipped (the third starts with nothing to catch up).
			for round, n := range []struct{ down, up int }{{0, 4}, {3, 2}, {0, 1}, {5, 0}} {
				publish(n.down)
				rb := start(t, opts)
				publish(n.up)
				stored(len(ids))
				require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == uint64(n.down+n.up) }, 30*time.Second, 5*time.Millisecond,
					"round %d: each message carried by one bridge", round)
				rb.stop(t)
				s := routeStats(rb.b, "orders-out")
				require.Equal(t, uint64(n.down+n.up), s.Forwarded, "round %d: each message carried by one bridge", round)
				require.Zero(t, s.Duplicates, "round %d: the bridge started right after the stream's last message", round)
			}
			// Every bridge has stopped (Shutdown waits for Run): no copy can
			// come later.
			info, err := st.Info(t.Context())
			require.NoError(t, err)
			require.Equal(t, uint64(len(ids)), info.State.Msgs, "none skipped, none twice")
			for i, id := range ids {
				m, err := st.GetMsg(t.Context(), uint64(i+1))
				require.NoError(t, err)
				require.Equal(t, id, m.Header.Get(HeaderMsgID), "in order")
				require.Equal(t, strconv.Itoa(i+1), m.Header.Get(HeaderSequence))
			}
		})
	}
}

// A JetStream Out route trusts no position but its own: when the last
// message on its NATS subject came from another publisher, another Pigeon
// subject or another route, names no sequence, or names one beyond the
// subject's end (another broker's numbering, or a broker that lost its
// store), and when the route has several deliveries in flight (they finish
// out of order, so its last message does not mark what came before), the
// route starts at the subject's end, as a new subscription does: what
// Pigeon held before it started is not carried, and what follows is.
func TestOutJetStreamForeignPosition(t *testing.T) {
	own := func(subject, seq, route string) nats.Header {
		return nats.Header{HeaderMsgID: {"foreign"}, HeaderSubject: {subject}, HeaderSequence: {seq}, HeaderBridge: {route}}
	}
	for _, tt := range []struct {
		name        string
		header      nats.Header
		maxInFlight int
	}{
		{"another publisher", nil, 0},
		{"another Pigeon subject", own("payments.authorize", "2", "orders-out"), 0},
		{"another route", own(ordersSubject, "2", "other-out"), 0},
		{"no sequence", own(ordersSubject, "two", "orders-out"), 0},
		{"beyond the subject's end", own(ordersSubject, "1000", "orders-out"), 0},
		{"several in flight", own(ordersSubject, "2", "orders-out"), 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st := v.stream(t, "OUT", "out.orders")
			pub := publisher(t, v.e)
			for i := range 5 { // held by Pigeon before any bridge ran
				_, err := pub.Publish(t.Context(), order("before-"+strconv.Itoa(i)))
				require.NoError(t, err)
			}
			_, err := v.js.PublishMsg(t.Context(), &nats.Msg{Subject: "out.orders", Header: tt.header, Data: []byte(`{"theirs":true}`)})
			require.NoError(t, err)

			rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, MaxInFlight: tt.maxInFlight},
			}})
			var ids []string
			for i := range 2 {
				res, err := pub.Publish(t.Context(), order("after-"+strconv.Itoa(i)))
				require.NoError(t, err)
				ids = append(ids, res.Message.ID)
			}
			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded >= 2 }, 30*time.Second, 5*time.Millisecond)
			// Stopped (Shutdown waits for Run), the bridge has stored all it
			// carried: anything from before the start would be there too.
			rb.stop(t)
			info, err := st.Info(t.Context())
			require.NoError(t, err)
			require.Equal(t, uint64(3), info.State.Msgs, "the foreign message, then what was published after the start")
			var got []string
			for seq := uint64(2); seq <= 3; seq++ {
				m, err := st.GetMsg(t.Context(), seq)
				require.NoError(t, err)
				got = append(got, m.Header.Get(HeaderMsgID))
			}
			require.ElementsMatch(t, ids, got, "in flight together, they may be stored in either order")
		})
	}
}
