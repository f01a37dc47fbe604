package ws_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/wire"
	"pigeon/transport/transporttest"
	"pigeon/transport/ws"
)

func TestPingPong(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	f := r.ok(ws.OpPing, "", ws.OpPong)
	require.Equal(t, "c1", f.Re)
}

func TestNegotiatePublishDecision(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "orders-token")
	r.fail(ws.OpPublish, `,"message":`+msgJSON(t, demo.Notification("k-1")), pigeon.CodeContractRequired)
	info := r.negotiate("notifications.send")
	require.Equal(t, demo.Orders, info.Principal)
	require.Equal(t, "uk", info.Region, "the engine's region when the upgrade names none")
	require.Len(t, info.Subjects, 1)

	f := r.ok(ws.OpPublish, `,"message":`+msgJSON(t, demo.Notification("k-1")), ws.OpDecision)
	require.Equal(t, pigeon.StatusAccepted, f.Status)
	m := decodeMsg(t, f.Message)
	require.Equal(t, uint64(1), m.Sequence)
	require.Equal(t, demo.Orders, m.Source)
	require.Equal(t, info.ID, m.ContractID)

	dup := r.ok(ws.OpPublish, `,"message":`+msgJSON(t, demo.Notification("k-1")), ws.OpDecision)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, m.ID, decodeMsg(t, dup.Message).ID)

	r.fail(ws.OpPublish, `,"message":[1]`, pigeon.CodeEnvelopeInvalid)
	r.fail(ws.OpPublish, ``, pigeon.CodeEnvelopeInvalid)
	r.fail(ws.OpNegotiate, `,"subjects":["payments.authorize"]`, pigeon.CodeNoPermittedSubjects)
	r.fail(ws.OpNegotiate, `,"subjects":["no.such"]`, pigeon.CodeSubjectNotFound)
	r.fail(ws.OpNegotiate, `,"subjects":[]`, pigeon.CodeBadRequest)
}

// A client that pipelines negotiate and publish without waiting gets the
// publish judged under the new contract: negotiate is a barrier.
func TestNegotiateIsABarrier(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "orders-token")
	r.write(`{"op":"negotiate","id":"n","subjects":["notifications.send"]}`)
	r.write(`{"op":"publish","id":"p","message":` + msgJSON(t, demo.Notification("k-1")) + `}`)
	require.Equal(t, ws.OpContract, r.answer("n").Op)
	f := r.answer("p")
	require.Equal(t, ws.OpDecision, f.Op, "%+v", f.Error)
}

func TestQuarantinedPublishCarriesTheDecision(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "checkout-token")
	r.negotiate("payments.authorize")
	m := demo.Payment("o-1")
	m.Data = json.RawMessage(`{"merchantId":"m","orderId":"o","amount":1,"currency":"GBP","paymentToken":"t","card":{"pan":"4111111111111111"}}`)
	f := r.fail(ws.OpPublish, `,"message":`+msgJSON(t, m), pigeon.CodeSensitiveFieldDenied)
	require.NotEmpty(t, f.Error.Details["quarantineId"])
	d, ok := f.Error.Details["decision"].(map[string]any)
	require.True(t, ok, "details.decision: %+v", f.Error.Details)
	require.Equal(t, "quarantine", d["outcome"])
	require.NotContains(t, f.Error.Message, "4111111111111111")
	err := f.Error.Err()
	require.ErrorIs(t, err, pigeon.ErrQuarantined)
	require.ErrorIs(t, err, pigeon.ErrDenied)
	_, hasDecision := err.Details["decision"]
	require.False(t, hasDecision, "the decision moves out of details into Error.Decision")
	require.Equal(t, pigeon.OutcomeQuarantine, err.Decision.Outcome)
}

func TestSubscribeDeliverAckNack(t *testing.T) {
	v := newEnv(t, nil, longAckWait) // the second attempt is the nack's, not the ack wait's
	boss := v.raw(t, "boss-token")
	boss.negotiate("jobs.run")
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g","maxInFlight":1`, ws.OpSubscribed).Sub
	require.NotEmpty(t, sub)

	job := `{"type":"job","subject":"jobs.run","intent":"run","data":{"n":1}}`
	id := decodeMsg(t, boss.ok(ws.OpPublish, `,"message":`+job, ws.OpDecision).Message).ID

	d := crew.push()
	require.Equal(t, ws.OpDeliver, d.Op)
	require.Equal(t, sub, d.Sub)
	require.Equal(t, 1, d.Attempt)
	require.Equal(t, id, decodeMsg(t, d.Message).ID)
	crew.fail(ws.OpNack, `,"sub":"`+sub+`","messageId":"`+id+`","delayMs":43200001`, pigeon.CodeInvalidArgument)
	crew.ok(ws.OpNack, `,"sub":"`+sub+`","messageId":"`+id+`","delayMs":0`, ws.OpOK)

	d = crew.push()
	require.Equal(t, 2, d.Attempt, "redelivered after the nack")
	crew.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+id+`"`, ws.OpOK)
	crew.fail(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+id+`"`, pigeon.CodeAckNotAllowed)
	crew.fail(ws.OpAck, `,"sub":"nope","messageId":"`+id+`"`, pigeon.CodeBadRequest)
	crew.fail(ws.OpAck, `,"sub":"`+sub+`"`, pigeon.CodeBadRequest)

	crew.ok(ws.OpUnsubscribe, `,"sub":"`+sub+`"`, ws.OpOK)
	crew.fail(ws.OpUnsubscribe, `,"sub":"`+sub+`"`, pigeon.CodeBadRequest)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","start":"middle"`, pigeon.CodeInvalidArgument)
	crew.fail(ws.OpSubscribe, `,"subject":"no.such"`, pigeon.CodeSubjectNotFound)
	crew.fail(ws.OpSubscribe, `,"subject":"jobs.run","selector":"nope"`, pigeon.CodeSelectorInvalid)
}

func TestSubscribeStartPositions(t *testing.T) {
	v := newEnv(t, nil)
	alice := v.raw(t, "alice-token")
	alice.negotiate("chat.messages")
	for _, text := range []string{"a", "b", "c"} {
		alice.ok(ws.OpPublish, `,"message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"`+text+`"}}`, ws.OpDecision)
	}
	for _, tc := range []struct{ start, first string }{{`"first"`, `{"text":"a"}`}, {`{"sequence":2}`, `{"text":"b"}`}} {
		bob := v.raw(t, "bob-token")
		bob.negotiate("chat.messages")
		sub := bob.ok(ws.OpSubscribe, `,"subject":"chat.messages","start":`+tc.start, ws.OpSubscribed).Sub
		d := bob.push()
		require.JSONEq(t, tc.first, string(decodeMsg(t, d.Message).Data), "start %s", tc.start)
		bob.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+decodeMsg(t, d.Message).ID+`"`, ws.OpOK)
	}
	// Member names are case-sensitive, inside start too.
	carol := v.raw(t, "bob-token")
	carol.negotiate("chat.messages")
	carol.fail(ws.OpSubscribe, `,"subject":"chat.messages","start":{"Sequence":2}`, pigeon.CodeInvalidArgument)
}

func TestReceiveAckReplay(t *testing.T) {
	v := newEnv(t, nil)
	orders := v.raw(t, "orders-token")
	orders.negotiate("notifications.send")
	orders.ok(ws.OpPublish, `,"message":`+msgJSON(t, demo.Notification("k-1")), ws.OpDecision)

	worker := v.raw(t, "notifier-token")
	worker.negotiate("notifications.send")
	f := worker.ok(ws.OpReceive, `,"subject":"notifications.send","max":10`, ws.OpMessages)
	require.Len(t, f.Messages, 1)
	id := decodeMsg(t, f.Messages[0]).ID
	worker.fail(ws.OpNack, `,"subject":"notifications.send","messageId":"`+id+`","delayMs":43200001`, pigeon.CodeInvalidArgument)
	worker.ok(ws.OpNack, `,"subject":"notifications.send","messageId":"`+id+`","delayMs":0`, ws.OpOK)
	f = worker.ok(ws.OpReceive, `,"subject":"notifications.send","max":10`, ws.OpMessages)
	require.Len(t, f.Messages, 1, "nacked with no delay: due again at once")
	worker.ok(ws.OpAck, `,"subject":"notifications.send","messageId":"`+id+`"`, ws.OpOK)
	worker.fail(ws.OpAck, `,"subject":"notifications.send","messageId":"msg_nope"`, pigeon.CodeMessageNotFound)
	f = worker.ok(ws.OpReceive, `,"subject":"notifications.send"`, ws.OpMessages)
	require.Empty(t, f.Messages)

	ops := v.raw(t, "notify-replay-token")
	ops.negotiate("notifications.send")
	ops.fail(ws.OpReplay, `,"subject":"notifications.send"`, pigeon.CodeReplayDenied)
	f = ops.ok(ws.OpReplay, `,"subject":"notifications.send","reason":"audit","fromSequence":1,"toSequence":1`, ws.OpMessages)
	require.Len(t, f.Messages, 1)
	require.Equal(t, id, decodeMsg(t, f.Messages[0]).ID)
}

func TestRequestReply(t *testing.T) {
	v := newEnv(t, nil)
	gateway := v.raw(t, "gateway-token")
	gateway.negotiate("payments.authorize")
	sub := gateway.ok(ws.OpSubscribe, `,"subject":"payments.authorize"`, ws.OpSubscribed).Sub

	checkout := v.raw(t, "checkout-token")
	checkout.negotiate("payments.authorize")
	checkout.write(`{"op":"request","id":"r1","timeoutMs":10000,"message":` + msgJSON(t, demo.Payment("o-1")) + `}`)

	d := gateway.push()
	req := decodeMsg(t, d.Message)
	reply := `{"type":"payment.authorization.result","subject":"payments.authorize","intent":"authorize_payment","classification":"pci","correlationId":"` + req.ID + `","data":{"approved":true}}`
	gateway.ok(ws.OpPublish, `,"message":`+reply, ws.OpDecision)
	gateway.ok(ws.OpAck, `,"sub":"`+sub+`","messageId":"`+req.ID+`"`, ws.OpOK)

	f := checkout.answer("r1")
	require.Equal(t, ws.OpReply, f.Op, "%+v", f.Error)
	m := decodeMsg(t, f.Message)
	require.Equal(t, req.ID, m.CorrelationID)
	require.Equal(t, demo.Gateway, m.Source)
	require.JSONEq(t, `{"approved":true}`, string(m.Data))

	checkout.fail(ws.OpRequest, `,"timeoutMs":20,"message":`+msgJSON(t, demo.Payment("o-2")), pigeon.CodeRequestTimeout)
	checkout.fail(ws.OpRequest, `,"timeoutMs":-1,"message":`+msgJSON(t, demo.Payment("o-3")), pigeon.CodeInvalidArgument)
}

func TestBadFramesKeepTheConnection(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	tests := []struct {
		name, frame, re string
	}{
		{"not JSON", `hello`, ""},
		{"truncated JSON", `{"op":"ping","id":"x"`, ""},
		{"array", `[{"op":"ping","id":"x"}]`, ""},
		{"string", `"ping"`, ""},
		{"no op", `{"id":"a"}`, "a"},
		{"no id", `{"op":"ping"}`, ""},
		{"empty id", `{"op":"ping","id":""}`, ""},
		{"numeric id", `{"op":"ping","id":7}`, ""},
		{"unknown op", `{"op":"fly","id":"b"}`, "b"},
		{"field of the wrong type", `{"op":"receive","id":"c","max":"ten"}`, "c"},
		{"answer op sent by a client", `{"op":"deliver","id":"d"}`, "d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.write(tc.frame)
			f := r.next()
			require.Equal(t, ws.OpError, f.Op)
			require.Equal(t, tc.re, f.Re)
			require.Equal(t, pigeon.CodeBadRequest, f.Error.Code)
			r.ok(ws.OpPing, "", ws.OpPong)
		})
	}
	t.Run("binary frame", func(t *testing.T) {
		require.NoError(t, r.c.Write(context.Background(), websocket.MessageBinary, []byte(`{"op":"ping","id":"x"}`)))
		f := r.next()
		require.Equal(t, pigeon.CodeBadRequest, f.Error.Code)
		r.ok(ws.OpPing, "", ws.OpPong)
	})
}

func TestOversizedFrameCloses1009(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxFrame: 4096})
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	r.ok(ws.OpPublish, `,"message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"`+strings.Repeat("x", 3000)+`"}}`, ws.OpDecision)
	r.write(`{"op":"publish","id":"big","message":{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"` + strings.Repeat("x", 5000) + `"}}}`)
	require.Equal(t, websocket.StatusMessageTooBig, r.closeStatus())
	eventually(t, func() bool { return v.srv.Stats().TooBig == 1 && v.srv.Stats().Open == 0 }, "counted and closed: %+v", v.srv.Stats())
}

func TestDefaultFrameLimitIsOneMiB(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.write(`{"op":"ping","id":"` + strings.Repeat("x", 1<<20) + `"}`)
	require.Equal(t, websocket.StatusMessageTooBig, r.closeStatus())
}

func TestUpgradeWithoutCredentialIs401(t *testing.T) {
	v := newEnv(t, nil)
	for _, auth := range []string{"", "Bearer nobody-token", "Basic YTpi"} {
		req, err := http.NewRequest(http.MethodGet, v.hs.URL+"/v1/ws", nil)
		require.NoError(t, err)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "auth %q", auth)
		require.Empty(t, resp.Header.Get("Upgrade"), "not upgraded")
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		var out struct{ Error wire.Error }
		require.NoError(t, json.Unmarshal(body, &out), "%s", body)
		require.Equal(t, pigeon.CodeUnauthenticated, out.Error.Code)
	}
	_, resp, err := websocket.Dial(context.Background(), v.url, nil)
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, int64(0), v.srv.Stats().Accepted)
}

// A browser cannot set headers: it offers the subprotocols pigeon.v1 and
// pigeon.bearer.<token>, and names its region in the query.
func TestBrowserAuthenticatesThroughSubprotocol(t *testing.T) {
	v := newEnv(t, nil)
	v.url += "?region=eu"
	r := v.rawWith(t, &websocket.DialOptions{
		Subprotocols: []string{ws.Subprotocol, ws.BearerSubprotocolPrefix + "alice-token"},
		HTTPHeader:   http.Header{"Origin": {v.hs.URL}},
	})
	require.Equal(t, "pigeon.v1", r.c.Subprotocol())
	info := r.negotiate("chat.messages")
	require.Equal(t, transporttest.Alice, info.Principal)
	require.Equal(t, "eu", info.Region)

	_, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
		Subprotocols: []string{ws.Subprotocol, ws.BearerSubprotocolPrefix + "nobody-token"},
	})
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, resp, err = websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
		Subprotocols: []string{ws.Subprotocol, ws.BearerSubprotocolPrefix + "alice-token"},
		HTTPHeader:   http.Header{"Origin": {"https://evil.example"}},
	})
	require.Error(t, err, "a foreign origin is refused unless allowed")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestForeignOriginAllowedByPattern(t *testing.T) {
	v := newEnv(t, &ws.Options{OriginPatterns: []string{"app.example"}})
	r := v.rawWith(t, &websocket.DialOptions{
		Subprotocols: []string{ws.Subprotocol, ws.BearerSubprotocolPrefix + "alice-token"},
		HTTPHeader:   http.Header{"Origin": {"https://app.example"}},
	})
	r.ok(ws.OpPing, "", ws.OpPong)
}

func TestRegionFromHeader(t *testing.T) {
	v := newEnv(t, nil)
	r := v.rawWith(t, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer orders-token"}, "X-Pigeon-Region": {"eu"}}})
	require.Equal(t, "", r.c.Subprotocol(), "no subprotocol offered, none answered")
	require.Equal(t, "eu", r.negotiate("notifications.send").Region)
	m := demo.Notification("k-eu")
	m.Region = "uk"
	r.fail(ws.OpPublish, `,"message":`+msgJSON(t, m), pigeon.CodeRegionDenied)

	// A region no message could carry is refused at the upgrade.
	for _, region := range []string{strings.Repeat("r", pigeon.MaxEnvelopeField+1), "u\xffk"} {
		_, resp, err := websocket.Dial(context.Background(), v.url, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer orders-token"}, "X-Pigeon-Region": {region}}})
		require.Error(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}
}

// An upgrade that says who or where twice is refused 400 BAD_REQUEST before
// anything is resolved: readers (a proxy in front, the broker) would
// disagree on which value counts. Saying it once, in either place, or the
// same region in both, is fine.
func TestUpgradeSayingItTwiceIsRefused(t *testing.T) {
	v := newEnv(t, nil)
	bearer := func(tok string) string { return ws.BearerSubprotocolPrefix + tok }
	tests := []struct {
		name   string
		query  string
		header http.Header
		protos []string
		status int
		region string // of the session, when accepted
	}{
		{"Authorization twice", "", http.Header{"Authorization": {"Bearer alice-token", "Bearer bob-token"}}, nil, http.StatusBadRequest, ""},
		{"Authorization twice, the same", "", http.Header{"Authorization": {"Bearer alice-token", "Bearer alice-token"}}, nil, http.StatusBadRequest, ""},
		{"header and subprotocol", "", http.Header{"Authorization": {"Bearer alice-token"}}, []string{ws.Subprotocol, bearer("bob-token")}, http.StatusBadRequest, ""},
		{"two bearer subprotocols", "", nil, []string{ws.Subprotocol, bearer("alice-token"), bearer("bob-token")}, http.StatusBadRequest, ""},
		{"region header twice", "", http.Header{"Authorization": {"Bearer alice-token"}, "X-Pigeon-Region": {"eu", "uk"}}, nil, http.StatusBadRequest, ""},
		{"region parameter twice", "?region=eu&region=uk", http.Header{"Authorization": {"Bearer alice-token"}}, nil, http.StatusBadRequest, ""},
		{"region header and parameter differ", "?region=uk", http.Header{"Authorization": {"Bearer alice-token"}, "X-Pigeon-Region": {"eu"}}, nil, http.StatusBadRequest, ""},
		{"region header and parameter agree", "?region=eu", http.Header{"Authorization": {"Bearer alice-token"}, "X-Pigeon-Region": {"eu"}}, nil, http.StatusSwitchingProtocols, "eu"},
		{"subprotocol and parameter", "?region=eu", nil, []string{ws.Subprotocol, bearer("alice-token")}, http.StatusSwitchingProtocols, "eu"},
		{"header once", "", http.Header{"Authorization": {"Bearer alice-token"}, "X-Pigeon-Region": {"uk"}}, nil, http.StatusSwitchingProtocols, "uk"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header.Clone()
			if h == nil {
				h = http.Header{}
			}
			h.Set("Origin", v.hs.URL)
			c, resp, err := websocket.Dial(context.Background(), v.url+tc.query, &websocket.DialOptions{HTTPHeader: h, Subprotocols: tc.protos})
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status != http.StatusSwitchingProtocols {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			r := &rawClient{t: t, c: c}
			t.Cleanup(func() { _ = c.CloseNow() })
			require.Equal(t, tc.region, r.negotiate("chat.messages").Region)
		})
	}
}

// Unsubscribe frames for one subscription, sent back to back so that they
// run at once or the second before the first is forgotten: exactly one is
// answered ok, the other refused as for a subscription already gone.
func TestUnsubscribeTwiceAnswersOnce(t *testing.T) {
	v := newEnv(t, nil)
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	for i := range 20 {
		sub := crew.ok(ws.OpSubscribe, `,"subject":"jobs.run","group":"g`+strconv.Itoa(i)+`"`, ws.OpSubscribed).Sub
		a, b := "u"+strconv.Itoa(2*i), "u"+strconv.Itoa(2*i+1)
		crew.write(`{"op":"unsubscribe","id":"` + a + `","sub":"` + sub + `"}`)
		crew.write(`{"op":"unsubscribe","id":"` + b + `","sub":"` + sub + `"}`)
		answers := map[string]string{}
		for len(answers) < 2 {
			f := crew.next()
			if f.Re == "" {
				continue // a push
			}
			answers[f.Re] = f.Op
			if f.Op == ws.OpError {
				require.Equal(t, pigeon.CodeBadRequest, f.Error.Code)
			}
		}
		require.ElementsMatch(t, []string{ws.OpOK, ws.OpError}, []string{answers[a], answers[b]}, "round %d", i)
	}
}

// The subscribed answer of a pubsub subscription names the first sequence
// it delivers (from), wherever its start put it; a work-queue subscription,
// whose group keeps its place, names none.
func TestSubscribedNamesWhereItStarts(t *testing.T) {
	v := newEnv(t, nil)
	ctx := context.Background()
	alice, err := v.e.Connect(ctx, "alice-token", []string{"chat.messages"})
	require.NoError(t, err)
	defer alice.Close(ctx)
	for range 3 {
		_, err = alice.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{}`)})
		require.NoError(t, err)
	}
	bob := v.raw(t, "bob-token")
	bob.negotiate("chat.messages")
	for _, tc := range []struct {
		start string
		from  uint64
	}{{"", 4}, {`,"start":"new"`, 4}, {`,"start":"first"`, 1}, {`,"start":{"sequence":2}`, 2}} {
		f := bob.ok(ws.OpSubscribe, `,"subject":"chat.messages"`+tc.start, ws.OpSubscribed)
		require.Equal(t, tc.from, f.From, "start %s", tc.start)
	}
	crew := v.raw(t, "crew-token")
	crew.negotiate("jobs.run")
	require.Zero(t, crew.ok(ws.OpSubscribe, `,"subject":"jobs.run"`, ws.OpSubscribed).From)
}
