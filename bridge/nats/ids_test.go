package natsbridge

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// A core NATS publisher names the id of its messages (Nats-Msg-Id, or its
// envelope's id), but only within its route: it cannot take ahead of time
// the id of a message another route carries, a JetStream route's
// "nats-<stream>/<durable>-<created>-<sequence>" or another core route's publisher's id, which
// the broker would then refuse MESSAGE_ID_TAKEN (a JetStream message
// terminated) or the bridge count as a duplicate (dropped). A publisher's
// own retry is still recognised.
func TestInCoreIDsAreScopedByRoute(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "LEGACY", "legacy.js")
	got := subscribe(t, v.e, monitorToken, ordersSubject)
	rb := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "low-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.low", Template: ordersTemplate},
		{Name: "high-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.high", Template: ordersTemplate},
		{Name: "js-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.js", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	pub := func(subject, id, data string) {
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: []byte(data)}
		if id != "" {
			m.Header.Set(HeaderMsgID, id)
		}
		require.NoError(t, v.tc.PublishMsg(m))
	}

	// The attacker, who may publish on legacy.low only, takes the ids the
	// next JetStream messages and the high route's next message will have.
	pub("legacy.low", "nats-LEGACY-1", `{"orderId":"evil-1"}`)
	pub("legacy.low", "pay-1", `{"orderId":"evil-2"}`)
	pub("legacy.low", "", `{"id":"nats-LEGACY-2","type":"order.created","intent":"order_event","data":{"orderId":"evil-3"}}`)
	require.Eventually(t, func() bool { return routeStats(rb.b, "low-in").Forwarded == 3 }, 30*time.Second, 5*time.Millisecond)

	for _, d := range []string{`{"orderId":"js-1"}`, `{"orderId":"js-2"}`} {
		_, err := v.js.Publish(t.Context(), "legacy.js", []byte(d))
		require.NoError(t, err)
	}
	pub("legacy.high", "pay-1", `{"orderId":"good-1"}`)
	pub("legacy.high", "pay-1", `{"orderId":"good-1"}`) // its publisher's retry
	settled := func(name string, n uint64) func() bool {
		return func() bool {
			s := routeStats(rb.b, name)
			total := s.Forwarded + s.Duplicates
			for _, c := range s.Refused {
				total += c
			}
			return total == n
		}
	}
	require.Eventually(t, settled("js-in", 2), 30*time.Second, 5*time.Millisecond)
	require.Eventually(t, settled("high-in", 2), 30*time.Second, 5*time.Millisecond)

	js, high := routeStats(rb.b, "js-in"), routeStats(rb.b, "high-in")
	require.Empty(t, js.Refused, "no JetStream message is refused for an id a core publisher took")
	require.Equal(t, uint64(2), js.Forwarded)
	require.Empty(t, high.Refused)
	require.Equal(t, uint64(1), high.Forwarded, "the high route's message is not taken for the low route's")
	require.Equal(t, uint64(1), high.Duplicates, "its publisher's retry is recognised")

	require.Eventually(t, func() bool { return len(got.all()) == 6 }, 30*time.Second, 5*time.Millisecond)
	ids := map[string]string{}
	for _, m := range got.all() {
		var d struct{ OrderID string }
		require.NoError(t, json.Unmarshal(m.Data, &d))
		ids[d.OrderID] = m.ID
	}
	require.Equal(t, map[string]string{
		"evil-1": "nats:low-in:nats-LEGACY-1", "evil-2": "nats:low-in:pay-1", "evil-3": "nats:low-in:nats-LEGACY-2",
		"js-1": v.jsID(t, "LEGACY", "js-in", 1), "js-2": v.jsID(t, "LEGACY", "js-in", 2), "good-1": "nats:high-in:pay-1",
	}, ids)
}

// coreID keeps ids within an envelope field, and long ids of one route
// apart.
func TestCoreIDLength(t *testing.T) {
	r := &Route{Name: strings.Repeat("r", maxRouteName)}
	a, b := coreID(r, strings.Repeat("a", 300)), coreID(r, strings.Repeat("a", 299))
	require.LessOrEqual(t, len(a), 256)
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "nats:"+r.Name+":"))
	require.Equal(t, "nats:"+r.Name+":x", coreID(r, "x"))
	require.Empty(t, coreID(r, ""))
}

// A Nats-Msg-Id that is not UTF-8 is refused INVALID_UTF8, as the broker
// refuses such an id in process; over WebSocket the session would send
// U+FFFD in its place, and two different ids would be taken for one.
func TestInCoreInvalidUTF8ID(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			v := newEnv(t)
			rb := start(t, Options{Dialer: tr.dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
				{Name: "core-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.core", Template: ordersTemplate},
			}})
			for _, id := range []string{"a\xffb", "a\xfeb", "ok"} {
				m := &nats.Msg{Subject: "legacy.core", Header: nats.Header{}, Data: []byte(`{"orderId":"o"}`)}
				m.Header.Set(HeaderMsgID, id)
				require.NoError(t, v.tc.PublishMsg(m))
			}
			require.Eventually(t, func() bool {
				s := routeStats(rb.b, "core-in")
				return s.Forwarded+s.Duplicates+s.Refused[pigeon.CodeInvalidUTF8]+s.Dropped == 3
			}, 30*time.Second, 5*time.Millisecond)
			s := routeStats(rb.b, "core-in")
			require.Equal(t, map[pigeon.Code]uint64{pigeon.CodeInvalidUTF8: 2}, s.Refused)
			require.Equal(t, uint64(1), s.Forwarded)
		})
	}
}

// TestInJetStreamTwoBridgesOnOneStream: two bridges, configured apart, each
// consume one JetStream stream through a durable of its own into a
// subject of its own. A message's id names the durable beside the stream
// and sequence: with the stream's and sequence's alone, the second bridge
// published every message under the id the first had taken, and the
// broker refused it MESSAGE_ID_TAKEN (terminated): one subject got
// nothing. A redelivery through one durable is still recognised
// (TestInExactlyOnceAcrossRestart).
func TestInJetStreamTwoBridgesOnOneStream(t *testing.T) {
	v := newEnv(t)
	v.stream(t, "LEGACY", "legacy.>")
	orders := subscribe(t, v.e, monitorToken, ordersSubject)
	copies := subscribe(t, v.e, monitorToken, copySubject)
	one := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "orders-in", Direction: In, Subject: ordersSubject, NATSSubject: "legacy.orders", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	two := start(t, Options{Dialer: transports[0].dialer(t, v.e), Credential: bridgeToken, NATS: v.nc, Routes: []Route{
		{Name: "copy-in", Direction: In, Subject: copySubject, NATSSubject: "legacy.>", JetStream: true, Stream: "LEGACY", Template: ordersTemplate},
	}})
	const n = 3
	for i := range n {
		_, err := v.js.Publish(t.Context(), "legacy.orders", []byte(`{"orderId":"o-`+strconv.Itoa(i)+`"}`))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		a, b := routeStats(one.b, "orders-in"), routeStats(two.b, "copy-in")
		return a.Forwarded+uint64(len(a.Refused)) == n && b.Forwarded+uint64(len(b.Refused)) == n
	}, 30*time.Second, 5*time.Millisecond)
	require.Empty(t, routeStats(one.b, "orders-in").Refused)
	require.Empty(t, routeStats(two.b, "copy-in").Refused)
	require.Eventually(t, func() bool { return len(orders.all()) == n && len(copies.all()) == n }, 30*time.Second, 5*time.Millisecond)
	for i, m := range orders.all() {
		require.Equal(t, v.jsID(t, "LEGACY", "orders-in", uint64(i+1)), m.ID)
		require.Equal(t, v.jsID(t, "LEGACY", "copy-in", uint64(i+1)), copies.all()[i].ID)
		require.JSONEq(t, string(m.Data), string(copies.all()[i].Data))
	}
}
