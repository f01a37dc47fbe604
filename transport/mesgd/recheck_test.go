package mesgd_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testclock"
	"pigeon/transport/mesgd"
)

// waitFixture is a broker on a fake clock with the chat subject, erin's
// account holding the role chatter (publish and receive on chat), and a
// mesgd endpoint whose connections' writes st holds up once on; waiting
// learns each time a delivery starts to wait for its turn. Alice's
// credential ends at credEnd. The renewal reads the fake clock only when
// its real timer fires (poll an hour), so that a test moves the clock
// past an expiry without the renewal noticing: what it then sees is what
// the delivery itself checks.
type waitFixture struct {
	e       *pigeon.Engine
	clock   *testclock.Clock
	base    string
	st      *stall
	waiting chan struct{}
	credEnd time.Time
}

func newWaitFixture(t *testing.T) *waitFixture {
	t.Helper()
	ctx := context.Background()
	f := &waitFixture{clock: testclock.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), waiting: make(chan struct{}, 16), st: newStall()}
	f.credEnd = f.clock.Now().Add(10 * time.Minute)
	static := pigeon.NewStaticTokens(
		pigeon.StaticToken{Token: "alice-token", Principal: "alice"},
		pigeon.StaticToken{Token: "bob-token", Principal: "bob"},
		pigeon.StaticToken{Token: "erin-token", Principal: "erin"},
	)
	auth := pigeon.AuthenticatorFunc(func(ctx context.Context, credential string) (*pigeon.Principal, error) {
		p, err := static.Authenticate(ctx, credential)
		if err != nil || p.ID != "alice" {
			return p, err
		}
		q := *p
		q.Expires = f.credEnd
		return &q, nil
	})
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: auth,
		Now:           f.clock.Now,
		Catalog:       &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{chatPolicy("v1")}},
	})
	require.NoError(t, err)
	f.e = e
	_, err = e.PutRole(ctx, pigeon.Role{Name: "chatter", Permissions: []pigeon.Permission{{Subject: "chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "erin", Roles: []string{"chatter"}})
	require.NoError(t, err)

	srv := mesgd.New(e, mesgd.Options{Subject: "chat", PingInterval: -1})
	mesgd.SetClock(srv, f.clock.Now, time.Hour, nil)
	mesgd.SetWaiting(srv, func() { f.waiting <- struct{}{} })
	t.Cleanup(f.st.letGo) // a failed test lets the writes go too
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener = stallListener{Listener: hs.Listener, st: f.st}
	hs.Start()
	f.base = hs.URL
	stopAtEnd(t, srv, hs, e)
	return f
}

// holdALateDelivery connects token's holder on room=lobby, holds up the
// write of an error frame, and has bob publish a frame the connection
// selects: the engine judges its delivery, which then waits for its turn
// behind the error frame. It returns the connection and its contract.
func (f *waitFixture) holdALateDelivery(t *testing.T, token, principal string) (*websocket.Conn, pigeon.LiveContract) {
	t.Helper()
	ctx := context.Background()
	c := dialMesgd(t, f.base, "/mesgd/room=lobby", token, true)
	send(t, c, `{"room":"lobby","ready":true}`)
	require.Equal(t, true, readFrame(t, c)["ready"])
	wait(t, f.waiting, "the ready frame's echo never waited for its turn")
	var k pigeon.LiveContract
	live, _, err := f.e.LiveContracts(ctx, 10)
	require.NoError(t, err)
	for _, l := range live {
		if l.Principal == principal {
			k = l
		}
	}
	require.NotEmpty(t, k.ID)

	f.st.on.Store(true)
	send(t, c, "x") // not JSON: its error frame takes the turn, and its write blocks
	wait(t, f.st.blocked, "the error frame was never written")
	bob, err := f.e.Connect(ctx, "bob-token", []string{"chat"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bob.Close(context.Background()) })
	_, err = bob.Publish(ctx, &pigeon.Message{Type: "chat.message", Subject: "chat", Intent: "chat", Classification: "internal",
		Data: json.RawMessage(`{"room":"lobby","late":true}`)})
	require.NoError(t, err)
	wait(t, f.waiting, "the delivery never came to wait for its turn")
	return c, k
}

// requireOnlyTheErrorFrame reads c to its close: the error frame, then
// the close with 1008 and code, and no delivery in between.
func requireOnlyTheErrorFrame(t *testing.T, c *websocket.Conn, code pigeon.Code) {
	t.Helper()
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var frames []string
	for {
		_, b, err := c.Read(rctx)
		if err != nil {
			require.Len(t, frames, 1, "the error frame, and no delivery after the contract stopped allowing it: %q", frames)
			require.Contains(t, frames[0], string(pigeon.CodeBadRequest))
			requireCloseError(t, err, websocket.StatusPolicyViolation, code)
			return
		}
		frames = append(frames, string(b))
	}
}

// TestExpiryDropsADeliveryWaitingItsTurn: a delivery judged before the
// contract expired (its credential's end: no renewal lengthens it) but
// still waiting its turn to be written then is dropped, and the
// connection closes with 1008 CONTRACT_EXPIRED. Before, only a
// revocation dropped it (it cancels the delivery; an expiry cancels
// nothing): the frame was written after the expiry, whenever the error
// frame ahead of it went out.
func TestExpiryDropsADeliveryWaitingItsTurn(t *testing.T) {
	f := newWaitFixture(t)
	c, k := f.holdALateDelivery(t, "alice-token", "alice")
	require.True(t, k.ExpiresAt.Equal(f.credEnd), "the contract ends with the credential: %v", k.ExpiresAt)
	f.clock.Advance(f.credEnd.Sub(f.clock.Now()))
	f.st.letGo()
	requireOnlyTheErrorFrame(t, c, pigeon.CodeContractExpired)
}

// TestRoleRemovalDropsADeliveryWaitingItsTurn: a delivery judged before
// the role it relied on was taken from the account, but still waiting
// its turn to be written then, is dropped, and the connection closes
// with 1008 GRANT_REVOKED. Before, it was written after the removal, and
// the connection stayed up until the next delivery's check.
func TestRoleRemovalDropsADeliveryWaitingItsTurn(t *testing.T) {
	f := newWaitFixture(t)
	c, _ := f.holdALateDelivery(t, "erin-token", "erin")
	_, err := f.e.RemoveAccountRole(context.Background(), "erin", "chatter")
	require.NoError(t, err)
	f.st.letGo()
	requireOnlyTheErrorFrame(t, c, pigeon.CodeGrantRevoked)
}
