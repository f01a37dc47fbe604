package natsbridge

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A NATS client that may subscribe to an Out route's NATS subject sees
// each publish with its reply inbox, and can answer there before the
// stream does (or where no stream answers at all): the route took its
// forged PubAck for the stream's, and the broker was told the message was
// stored when the stream never had it. The route now reads the message
// back from the stream the PubAck names, which must be the route's, at
// the sequence it names; until the stream holds it, the publish fails
// and the broker redelivers.
func TestForgedPubAckIsNotBelieved(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stream string // the route's Stream
		ack    string // what the forger answers
	}{
		{"no stream takes the subject", "", `{"stream":"BUS","seq":1}`},
		{"the stream holds another message there", "BUS", `{"stream":"BUS","seq":1}`},
		{"another stream named", "BUS", `{"stream":"ELSE","seq":1}`},
		{"a sequence beyond the stream's", "BUS", `{"stream":"BUS","seq":99}`},
		{"a forged duplicate", "BUS", `{"stream":"BUS","seq":1,"duplicate":true}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st := v.stream(t, "BUS", "other.x")
			v.stream(t, "ELSE", "else.x")
			_, err := v.js.Publish(t.Context(), "other.x", []byte(`{"other":true}`))
			require.NoError(t, err)
			_, err = v.js.Publish(t.Context(), "else.x", []byte(`{"other":true}`))
			require.NoError(t, err)

			var forged atomic.Int64
			forger, err := v.tc.Subscribe("out.orders", func(m *nats.Msg) {
				if m.Reply != "" && m.Respond([]byte(tt.ack)) == nil {
					forged.Add(1)
				}
			})
			require.NoError(t, err)
			require.NoError(t, v.tc.Flush())

			rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: tt.stream},
			}})
			res, err := publisher(t, v.e).Publish(t.Context(), order("o-1"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return forged.Load() >= 3 || routeStats(rb.b, "orders-out").Forwarded > 0 },
				30*time.Second, 5*time.Millisecond)
			require.Zero(t, routeStats(rb.b, "orders-out").Forwarded, "a forged PubAck taken for the stream's")

			// Once the forger is gone and the stream takes the subject, the
			// broker's redelivery is stored and acknowledged.
			require.NoError(t, forger.Unsubscribe())
			require.NoError(t, v.tc.Flush())
			_, err = v.js.UpdateStream(t.Context(), jetstream.StreamConfig{Name: "BUS", Subjects: []string{"other.x", "out.orders"}})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond)
			got, err := st.GetLastMsgForSubject(t.Context(), "out.orders")
			require.NoError(t, err)
			require.Equal(t, string(res.AppendMessageJSON(nil)), string(got.Data))
		})
	}
}

// A PubAck's message that the stream no longer holds is borne out only on
// a stream whose consumers remove what they take (work-queue, interest),
// at a sequence the stream gave out, and not for a duplicate: a consumer
// may take the message between the PubAck and its read-back. On a limits
// stream, or beyond the stream's last sequence, it is not.
func TestReadBackOfARemovedMessage(t *testing.T) {
	for _, tt := range []struct {
		name      string
		retention jetstream.RetentionPolicy
		seq       uint64
		duplicate bool
		held      bool
	}{
		{"work queue, taken by a consumer", jetstream.WorkQueuePolicy, 1, false, true},
		{"interest, taken by a consumer", jetstream.InterestPolicy, 1, false, true},
		{"work queue, beyond the last sequence", jetstream.WorkQueuePolicy, 5, false, false},
		{"work queue, a duplicate", jetstream.WorkQueuePolicy, 1, true, false},
		{"limits, deleted", jetstream.LimitsPolicy, 1, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newEnv(t)
			st, err := v.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "BUS", Subjects: []string{"out.orders"}, Retention: tt.retention})
			require.NoError(t, err)
			msg := &nats.Msg{Subject: "out.orders", Data: []byte(`{"a":1}`)}
			ack, err := v.js.PublishMsg(t.Context(), msg)
			require.NoError(t, err)
			if tt.retention != jetstream.InterestPolicy { // without consumers it keeps nothing
				require.NoError(t, st.DeleteMsg(t.Context(), ack.Sequence)) // as a consumer's ack removes it
			}
			b, err := New(Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "BUS"},
			}})
			require.NoError(t, err)
			js, err := jetstream.New(v.nc)
			require.NoError(t, err)
			g := &generation{nc: v.nc, js: js, ctx: t.Context(), failed: make(chan struct{})}
			held, err := b.routes[0].(*outRoute).verify(t.Context(), g, &jetstream.PubAck{Stream: "BUS", Sequence: tt.seq, Duplicate: tt.duplicate}, msg)
			require.NoError(t, err)
			require.Equal(t, tt.held, held)
		})
	}
}

// A stream that transforms the subjects it takes stores what the route
// publishes under another subject: the read-back still knows it for the
// route's (by its Pigeon-Bridge header), rather than fail every publish.
func TestReadBackThroughASubjectTransform(t *testing.T) {
	v := newEnv(t)
	st, err := v.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "BUS", Subjects: []string{"out.orders"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: "out.orders", Destination: "stored.orders"}})
	require.NoError(t, err)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "out.orders", JetStream: true, Stream: "BUS"},
	}})
	res, err := publisher(t, v.e).Publish(t.Context(), order("o-1"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return routeStats(rb.b, "orders-out").Forwarded == 1 }, 30*time.Second, 5*time.Millisecond,
		"stats: %+v", routeStats(rb.b, "orders-out"))
	got, err := st.GetLastMsgForSubject(t.Context(), "stored.orders")
	require.NoError(t, err)
	require.Equal(t, string(res.AppendMessageJSON(nil)), string(got.Data))
}
