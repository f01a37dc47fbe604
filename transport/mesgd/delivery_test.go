package mesgd_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/transport/mesgd"
)

// TestWorkQueueDeliveryCutByTheConsumerSpendsNoAttempt: on a work-queue
// subject, a delivery whose write the consumer cut (it stopped reading,
// then dropped the connection) never reached it: it goes back to the
// group with no attempt spent, as on /v1/ws (pigeon.ErrUndelivered).
// Before, the failed write was the handler's failure: each consumer that
// left with a frame half written spent an attempt of it (the job came
// back as its second attempt here, and once they ran out was given up,
// delivery.exhausted, unread). A refused frame waiting its turn to be
// answered meanwhile does not hold the connection up.
func TestWorkQueueDeliveryCutByTheConsumerSpendsNoAttempt(t *testing.T) {
	ctx := context.Background()
	both := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice", "bob"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
			pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "jobs", Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"work"},
			Delivery: pigeon.DeliveryPolicy{Retry: pigeon.RetryPolicy{MaxAttempts: 2}},
			Policy:   map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: both, pigeon.OpReceive: both},
		}}},
	})
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "jobs"})
	hs := httptest.NewServer(srv)
	stopAtEnd(t, srv, hs, e)

	c := dialMesgd(t, hs.URL, "/mesgd/room=lobby", "alice-token", true) // never reads
	var contract string
	require.Eventually(t, func() bool {
		live, _, err := e.LiveContracts(ctx, 10)
		require.NoError(t, err)
		if len(live) == 1 {
			contract = live[0].ID
		}
		return contract != ""
	}, 10*time.Second, 2*time.Millisecond)
	audited := func(ev pigeon.Event) int {
		recs, err := e.Audit(ctx, 0, 100000)
		require.NoError(t, err)
		n := 0
		for _, r := range recs {
			if r.Type == string(ev) {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return audited(pigeon.EventSubscriptionStarted) == 1 }, 10*time.Second, 2*time.Millisecond)

	bob, err := e.Connect(ctx, "bob-token", []string{"jobs"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	pad := strings.Repeat("x", 256<<10)
	for n := range 64 { // 16 MiB the consumer does not read: a write blocks
		_, err := bob.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs", Intent: "work", Classification: "internal",
			Data: json.RawMessage(`{"room":"lobby","n":` + strconv.Itoa(n) + `,"pad":"` + pad + `"}`)})
		require.NoError(t, err)
	}
	time.Sleep(200 * time.Millisecond) // a write is blocked now
	send(t, c, "x")                    // its error frame waits its turn
	_ = c.CloseNow()
	require.Eventually(t, func() bool {
		live, _, err := e.LiveContracts(ctx, 10)
		require.NoError(t, err)
		for _, k := range live {
			if k.ID == contract {
				return false
			}
		}
		return true
	}, 10*time.Second, 2*time.Millisecond, "the connection ended, its contract revoked")

	// What the cut connection did not take is there for the next
	// consumer of the group, each job on its first attempt: the ones
	// whose writes failed (given back, delivery.nacked) among them.
	nacked := func() map[string]int {
		recs, err := e.Audit(ctx, 0, 100000)
		require.NoError(t, err)
		ids := map[string]int{}
		for _, r := range recs {
			if r.Type == string(pigeon.EventDeliveryNacked) {
				ids[r.MessageID]++
			}
		}
		return ids
	}
	got := make(chan *pigeon.Delivery, 64)
	sub, err := bob.Subscribe(ctx, "jobs", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d
		return nil
	}, pigeon.WithSelector("/room=lobby"))
	require.NoError(t, err)
	defer sub.Unsubscribe(ctx)
	seen := map[string]bool{}
	for {
		missing := 0
		cut := nacked()
		for id := range cut {
			if !seen[id] {
				missing++
			}
		}
		if len(cut) > 0 && missing == 0 {
			break
		}
		select {
		case d := <-got:
			require.Equal(t, 1, d.Attempt, "%s came back as a later attempt", d.Message.ID)
			seen[d.Message.ID] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("of the %d jobs whose writes were cut, %d never came back", len(cut), missing)
		}
	}
	for id, n := range nacked() {
		require.Equal(t, 1, n, "%s was handed to the gone connection again and again", id)
	}
	require.Zero(t, audited(pigeon.EventDeliveryExhausted), "no job was given up unread")
}

// slowRevocations is a store whose write of a revoked contract takes a
// while, as a durable store's may; revoked learns it was written.
type slowRevocations struct {
	store.Store
	revoked atomic.Bool
}

func (s *slowRevocations) PutContract(ctx context.Context, c store.ContractRecord) error {
	if !c.Revoked {
		return s.Store.PutContract(ctx, c)
	}
	time.Sleep(300 * time.Millisecond)
	err := s.Store.PutContract(ctx, c)
	s.revoked.Store(true)
	return err
}

// TestShutdownWaitsForTheRevocation: Shutdown returns once each
// connection's contract is revoked, not before. Before, it returned when
// the connections had closed, their contracts still being revoked by
// handlers it no longer waited for: the broker then shut the engine
// down under them, and a contract whose revocation was cut short stayed
// live in the store until its expiry, counting toward its principal's
// live contracts.
func TestShutdownWaitsForTheRevocation(t *testing.T) {
	ctx := context.Background()
	st := &slowRevocations{Store: memory.New(nil)}
	rules := []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: []string{"alice"}}}
	e, err := pigeon.New(ctx, &pigeon.Options{
		Store:         st,
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "alice-token", Principal: "alice"}),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{{
			Name: "chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: rules, pigeon.OpReceive: rules},
		}}},
	})
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "chat"})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer func() { require.NoError(t, e.Shutdown(ctx)) }()

	c := dialMesgd(t, hs.URL, "/mesgd/room=lobby", "alice-token", true)
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	rctx := c.CloseRead(ctx) // answers the server's close

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, srv.Shutdown(sctx))
	require.True(t, st.revoked.Load(), "Shutdown returned before the connection's contract was revoked")
	<-rctx.Done()
}

// TestRevocationDropsADeliveryWaitingItsTurn: a delivery judged before a
// revocation but still waiting its turn to be written (behind an error
// frame whose write the client holds up by not reading) is dropped, as on
// /v1/ws: nothing is written to the connection after its contract ended
// but what was being written then. Before, it was written once the client
// read on, after the revocation, ahead of the 1008 close. The write is
// held up by the server's connection itself (stallConn), not by socket
// buffers the client leaves full, so the order is the same on any
// machine, whatever its load.
func TestRevocationDropsADeliveryWaitingItsTurn(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
			pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		),
		Catalog: &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{chatPolicy("v1")}},
	})
	require.NoError(t, err)
	srv := mesgd.New(e, mesgd.Options{Subject: "chat", PingInterval: -1})
	waiting := make(chan struct{}, 16) // a delivery waits for its turn
	mesgd.SetWaiting(srv, func() { waiting <- struct{}{} })
	st := newStall()
	defer st.letGo() // a failed test lets the write go too
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener = stallListener{Listener: hs.Listener, st: st}
	hs.Start()
	stopAtEnd(t, srv, hs, e)

	c := dialMesgd(t, hs.URL, "/mesgd/room=lobby", "alice-token", true)
	defer c.CloseNow()
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	wait(t, waiting, "the ready frame's echo never waited for its turn")
	live, _, err := e.LiveContracts(ctx, 10)
	require.NoError(t, err)
	require.Len(t, live, 1)

	st.on.Store(true)
	send(t, c, "x") // not JSON: its error frame takes the turn, and its write blocks
	wait(t, st.blocked, "the error frame was never written")

	bob, err := e.Connect(ctx, "bob-token", []string{"chat"})
	require.NoError(t, err)
	defer bob.Close(ctx)
	_, err = bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
		Data: json.RawMessage(`{"room":"lobby","late":true}`)})
	require.NoError(t, err)
	wait(t, waiting, "the delivery never came to wait for its turn")
	require.NoError(t, e.RevokeContract(ctx, &pigeon.Principal{ID: "alice"}, live[0].ID))
	st.letGo()

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var frames []string
	for {
		_, b, err := c.Read(rctx)
		if err != nil {
			requireCloseError(t, err, websocket.StatusPolicyViolation, pigeon.CodeContractRevoked)
			break
		}
		frames = append(frames, string(b))
	}
	require.Len(t, frames, 1, "the error frame, and nothing after the revocation: %q", frames)
	require.Contains(t, frames[0], string(pigeon.CodeBadRequest))
}

// stall holds up the writes of the server's connections once on, as a
// client that stopped reading would once the socket buffers are full:
// the first blocked write closes blocked, and every write waits for
// letGo.
type stall struct {
	on      atomic.Bool
	blocked chan struct{}
	release chan struct{}
	first   sync.Once
	once    sync.Once
}

func newStall() *stall {
	return &stall{blocked: make(chan struct{}), release: make(chan struct{})}
}

func (s *stall) letGo() { s.once.Do(func() { close(s.release) }) }

type stallListener struct {
	net.Listener
	st *stall
}

func (l stallListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return stallConn{Conn: conn, st: l.st}, nil
}

type stallConn struct {
	net.Conn
	st *stall
}

func (c stallConn) Write(b []byte) (int, error) {
	if c.st.on.Load() {
		c.st.first.Do(func() { close(c.st.blocked) })
		<-c.st.release
	}
	return c.Conn.Write(b)
}

func wait[T any](t *testing.T, ch <-chan T, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}
