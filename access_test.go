package pigeon_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/wire"
	"pigeon/store/memory"
	"pigeon/transport/transporttest"
)

const (
	carol = "spiffe://chat/carol"
	dave  = "spiffe://chat/dave"
)

// accessFixture is an engine with a chat subject that no catalog rule
// opens: access comes from roles only.
func accessFixture(t *testing.T, mutate ...func(*pigeon.Options)) *fixture {
	return newFixture(t, append([]func(*pigeon.Options){func(o *pigeon.Options) {
		base := transporttest.Options()
		o.Catalog = base.Catalog
		o.Catalog.Subjects = append(o.Catalog.Subjects, pigeon.SubjectPolicy{
			Name: "rooms.chat", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"chat"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "deny", Principals: []string{dave}, Intents: []string{"chat"}, When: `message.data.text == "spam"`}},
				pigeon.OpReceive: {{Effect: "allow", Roles: []string{"moderator"}}},
			},
		})
		o.Authenticator = pigeon.NewStaticTokens(append(transporttest.Options().Authenticator.(*pigeon.StaticTokens).Tokens(),
			pigeon.StaticToken{Token: "carol-token", Principal: carol},
			pigeon.StaticToken{Token: "dave-token", Principal: dave})...)
		o.Now = nil
	}}, mutate...)...)
}

func chatIn(room, text string) *pigeon.Message {
	b, _ := json.Marshal(map[string]string{"kind": "chat", "room": room, "text": text})
	return &pigeon.Message{Type: "chat", Subject: "rooms.chat", Intent: "chat", Data: b}
}

func TestRolePermissionsScopeContent(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "lobby-member", Permissions: []pigeon.Permission{
		{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}, Selector: "/room=lobby"},
	}})
	require.NoError(t, err)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "writer", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "bad", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{"fly"}}}})
	requireCode(t, err, pigeon.CodeBadRequest)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "bad", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}, Selector: "room=x"}}})
	requireCode(t, err, pigeon.CodeSelectorInvalid)

	_, err = e.Connect(ctx, "carol-token", []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"lobby-member"}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol})
	requireCode(t, err, pigeon.CodeConflict)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: dave, Roles: []string{"writer"}})
	require.NoError(t, err)

	c := f.connect("carol-token", "rooms.chat")
	cs := c.Contract().Info().Subjects[0]
	require.Equal(t, []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}, cs.Operations)
	require.Equal(t, []string{"/room=lobby"}, cs.Scope[pigeon.OpPublish])

	var mu sync.Mutex
	var got []string
	_, err = c.Subscribe(ctx, "rooms.chat", func(_ context.Context, d *pigeon.Delivery) error {
		var m map[string]string
		_ = json.Unmarshal(d.Message.Data, &m)
		mu.Lock()
		got = append(got, m["room"]+":"+m["text"])
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)

	_, err = c.Publish(ctx, chatIn("lobby", "hi"))
	require.NoError(t, err)
	_, err = c.Publish(ctx, chatIn("kitchen", "psst"))
	requireCode(t, err, pigeon.CodePolicyDenied)

	d := f.connect("dave-token", "rooms.chat")
	_, err = d.Publish(ctx, chatIn("kitchen", "from dave"))
	require.NoError(t, err, "an unscoped permission publishes anywhere")
	_, err = d.Publish(ctx, chatIn("lobby", "spam"))
	requireCode(t, err, pigeon.CodePolicyDenied) // a catalog deny rule still wins over a role permission
	_, err = d.Publish(ctx, chatIn("lobby", "from dave"))
	require.NoError(t, err)
	_, err = d.Subscribe(ctx, "rooms.chat", func(context.Context, *pigeon.Delivery) error { return nil })
	requireCode(t, err, pigeon.CodeOperationNotInContract)

	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	require.Equal(t, []string{"lobby:hi", "lobby:from dave"}, got, "kitchen messages never reach a lobby member")
	mu.Unlock()

	// Catalog rules may allow by role too.
	_, err = e.AddAccountRole(ctx, dave, "moderator")
	require.NoError(t, err)
	d2 := f.connect("dave-token", "rooms.chat")
	require.True(t, d2.Contract().Allows("rooms.chat", pigeon.OpReceive))
}

func TestRemovingRoleTakesEffectAtNextCheck(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	c := f.connect("carol-token", "rooms.chat")
	sub, err := c.Subscribe(ctx, "rooms.chat", func(context.Context, *pigeon.Delivery) error { return nil })
	require.NoError(t, err)
	_, err = c.Publish(ctx, chatIn("lobby", "before"))
	require.NoError(t, err)

	_, err = e.RemoveAccountRole(ctx, carol, "member")
	require.NoError(t, err)
	_, err = c.Publish(ctx, chatIn("lobby", "after"))
	requireCode(t, err, pigeon.CodeGrantRevoked)
	requireStopped(t, sub, pigeon.CodeGrantRevoked)
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var denied, stopped bool
	for _, r := range recs {
		denied = denied || (r.Type == "publish.denied" && r.Code == string(pigeon.CodeGrantRevoked))
		stopped = stopped || (r.Type == "subscription.stopped" && r.Code == string(pigeon.CodeGrantRevoked))
	}
	require.True(t, denied && stopped, "both are audited")
	_, err = e.Connect(ctx, "carol-token", []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)
}

func TestGrantTokens(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)

	_, err = e.IssueGrant(ctx, "spiffe://nobody", []string{"member"}, time.Hour)
	requireCode(t, err, pigeon.CodeNotFound)
	_, err = e.IssueGrant(ctx, carol, nil, time.Hour)
	requireCode(t, err, pigeon.CodeBadRequest)

	g, err := e.IssueGrant(ctx, carol, []string{"member", "admin"}, time.Hour)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(g.JTI, "gr_"))
	p, err := e.Authenticate(ctx, g.Token)
	require.NoError(t, err)
	require.Equal(t, carol, p.ID)
	require.Equal(t, []string{"member"}, p.Roles, "a grant gives only roles the account holds")

	s, err := e.Connect(ctx, g.Token, []string{"rooms.chat"})
	require.NoError(t, err)
	defer s.Close(ctx)
	_, err = s.Publish(ctx, chatIn("lobby", "hi"))
	require.NoError(t, err)

	// Revoking the grant refuses the token and stops the contract.
	require.NoError(t, e.RevokeGrant(ctx, g.JTI))
	require.NoError(t, e.RevokeGrant(ctx, g.JTI), "revoking twice is a no-op")
	requireCode(t, e.RevokeGrant(ctx, "gr_nope"), pigeon.CodeNotFound)
	_, err = s.Publish(ctx, chatIn("lobby", "again"))
	requireCode(t, err, pigeon.CodeGrantRevoked)
	_, err = e.Authenticate(ctx, g.Token)
	requireCode(t, err, pigeon.CodeUnauthenticated)

	// A grant for a role the account no longer holds gives nothing.
	g2, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	_, err = e.RemoveAccountRole(ctx, carol, "member")
	require.NoError(t, err)
	_, err = e.Connect(ctx, g2.Token, []string{"rooms.chat"})
	requireCode(t, err, pigeon.CodeNoPermittedSubjects)

	// Expired.
	g3, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Second)
	require.NoError(t, err)
	tok := g3.Token
	require.Eventually(t, func() bool {
		_, err := e.Authenticate(ctx, tok)
		return pigeon.ErrorCode(err) == pigeon.CodeUnauthenticated
	}, 30*time.Second, 50*time.Millisecond, "an expired grant is refused")
}

func TestForgedGrantTokensRefused(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"admin"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"admin"}, time.Hour)
	require.NoError(t, err)
	claims := jwt.MapClaims{"iss": "pigeon", "sub": carol, "jti": g.JTI, "roles": []string{"admin"}, "exp": time.Now().Add(time.Hour).Unix()}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	wrongKey, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, claims).SignedString(otherKey)
	require.NoError(t, err)
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	hs, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("guess"))
	require.NoError(t, err)
	parts := strings.Split(g.Token, ".")
	tampered := parts[0] + "." + strings.TrimRight(parts[1], "A") + "B." + parts[2]
	for name, tok := range map[string]string{"wrong key": wrongKey, "alg none": none, "HS256 confusion": hs, "tampered": tampered, "truncated": g.Token[:len(g.Token)-4]} {
		t.Run(name, func(t *testing.T) {
			_, err := e.Authenticate(ctx, tok)
			requireCode(t, err, pigeon.CodeUnauthenticated)
		})
	}
}

func TestAccountsAndStaticTokens(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	a, err := e.CreateAccount(ctx, pigeon.Account{ID: carol, Attributes: map[string]string{"team": "chat"}, Roles: []string{"b", "a", "a"}})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, a.Roles)
	p, err := e.Authenticate(ctx, "carol-token")
	require.NoError(t, err)
	require.Equal(t, "chat", p.Attributes["team"], "a static token resolves to its account")
	require.Equal(t, []string{"a", "b"}, p.Roles)
	_, err = e.AddAccountRole(ctx, "nobody", "x")
	requireCode(t, err, pigeon.CodeNotFound)
	require.Len(t, e.ListAccounts(ctx), 1)
	require.NoError(t, e.DeleteAccount(ctx, carol))
	requireCode(t, e.DeleteAccount(ctx, carol), pigeon.CodeNotFound)
	_, err = e.GetAccount(ctx, carol)
	requireCode(t, err, pigeon.CodeNotFound)
}

func TestAccessSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	e, st := openDurable(t, dir, nil)
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://x", Roles: []string{"r"}})
	require.NoError(t, err)
	_, err = e.PutRole(ctx, pigeon.Role{Name: "r", Permissions: []pigeon.Permission{{Subject: "payments.authorize", Operations: []pigeon.Operation{pigeon.OpReceive}, Selector: "/currency=GBP"}}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, "spiffe://x", []string{"r"}, time.Hour)
	require.NoError(t, err)
	closeDurable(t, e, st)
	e, st = openDurable(t, dir, nil)
	defer closeDurable(t, e, st)
	p, err := e.Authenticate(ctx, g.Token)
	require.NoError(t, err, "the grant key and grants are durable")
	require.Equal(t, []string{"r"}, p.Roles)
	r, err := e.GetRole(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, "/currency=GBP", r.Permissions[0].Selector)
}

// FuzzGrantTokenInput feeds arbitrary credentials through the grant-token
// path: nothing panics, and nothing but the issued token authenticates.
func FuzzGrantTokenInput(f *testing.F) {
	e, err := pigeon.New(context.Background(), &pigeon.Options{})
	require.NoError(f, err)
	defer e.Shutdown(context.Background())
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"r"}})
	require.NoError(f, err)
	g, err := e.IssueGrant(ctx, carol, []string{"r"}, time.Hour)
	require.NoError(f, err)
	f.Add(g.Token)
	f.Add("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	f.Add("eyJ.eyJ.")
	f.Add("eyJhbGciOiJFZERTQSJ9." + strings.Repeat("A", 100) + ".x")
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := e.Authenticate(context.Background(), tok)
		if tok == g.Token {
			require.NoError(t, err)
			return
		}
		if err == nil {
			t.Fatalf("credential %q authenticated as %s", tok, p.ID)
		}
	})
}

// A principal whose receive is scoped by a role permission pulls from its
// own group and must be able to ack and nack what it pulled.
func TestScopedPullReceiveAck(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "email-worker", Permissions: []pigeon.Permission{
		{Subject: "jobs.run", Operations: []pigeon.Operation{pigeon.OpReceive, pigeon.OpAck}, Selector: "/kind=email"},
	}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"email-worker"}})
	require.NoError(t, err)
	boss := f.connect("boss-token", "jobs.run")
	for _, kind := range []string{"sms", "email", "email"} {
		_, err := boss.Publish(ctx, &pigeon.Message{Type: "job", Subject: "jobs.run", Intent: "run", Data: json.RawMessage(`{"kind":"` + kind + `"}`)})
		require.NoError(t, err)
	}
	w := f.connect("carol-token", "jobs.run")
	got, err := w.Receive(ctx, "jobs.run", 10)
	require.NoError(t, err)
	require.Len(t, got, 2, "only email jobs are in scope")
	require.NoError(t, w.Ack(ctx, "jobs.run", got[0].ID))
	require.NoError(t, w.Nack(ctx, "jobs.run", got[1].ID, 0))
	again, err := w.Receive(ctx, "jobs.run", 10)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, got[1].ID, again[0].ID, "the nacked job comes back, the acked one does not")
}

func TestAccountAndRoleIDsValidated(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	long := strings.Repeat("a", pigeon.MaxIDLength+1)
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"spiffe id", "spiffe://merchant-prod/ns/checkout/sa/checkout-api", true},
		{"email-like", "ops_team.lead@example.com", true},
		{"longest", strings.Repeat("a", pigeon.MaxIDLength), true},
		{"empty", "", false},
		{"too long", long, false},
		{"NUL", "alice\x00admin", false},
		{"newline", "alice\nadmin", false},
		{"tab", "alice\tadmin", false},
		{"space", "alice admin", false},
		{"DEL", "alice\x7f", false},
		{"invalid UTF-8", "alice\xff", false},
		{"non-ASCII look-alike", "аlice", false}, // Cyrillic а
		{"quote", `alice"`, false},
		// A "." or ".." path segment: the id could not be named in a URL
		// path (/v1/accounts/{id}), which a server cleans of them.
		{"dot", ".", false},
		{"dot dot", "..", false},
		{"dot segment", "spiffe://x/./y", false},
		{"dot dot segment", "spiffe://x/../admin", false},
		{"trailing dot dot", "ops/..", false},
		{"dots within segments", "v1.2..3/a.b/..c/d..", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, accErr := e.CreateAccount(ctx, pigeon.Account{ID: tc.id})
			_, roleErr := e.PutRole(ctx, pigeon.Role{Name: tc.id})
			_, withRoleErr := e.CreateAccount(ctx, pigeon.Account{ID: "spiffe://x/" + tc.name[:1], Roles: []string{tc.id}})
			if tc.ok {
				require.NoError(t, accErr)
				require.NoError(t, roleErr)
				require.NoError(t, withRoleErr)
				return
			}
			requireCode(t, accErr, pigeon.CodeInvalidArgument)
			requireCode(t, roleErr, pigeon.CodeInvalidArgument)
			requireCode(t, withRoleErr, pigeon.CodeInvalidArgument)
			require.Equal(t, 400, wire.HTTPStatus(pigeon.CodeInvalidArgument))
		})
	}
	_, err := e.CreateAccount(ctx, pigeon.Account{ID: carol})
	require.NoError(t, err)
	_, err = e.AddAccountRole(ctx, carol, "bad\nrole")
	requireCode(t, err, pigeon.CodeInvalidArgument)
	_, err = e.IssueGrant(ctx, carol, []string{"bad\x00role"}, time.Hour)
	requireCode(t, err, pigeon.CodeInvalidArgument)
}

// Deleting a role or narrowing its permissions takes effect at the next
// check of every contract and subscription that relied on it, exactly as
// taking the role from the account does; changes that take nothing away
// leave them running.
func TestRoleChangesTakeEffectAtNextCheck(t *testing.T) {
	pub, recv, ack := pigeon.OpPublish, pigeon.OpReceive, pigeon.OpAck
	perm := func(sel string, ops ...pigeon.Operation) pigeon.Permission {
		return pigeon.Permission{Subject: "rooms.chat", Operations: ops, Selector: sel}
	}
	for _, tc := range []struct {
		name    string
		before  []pigeon.Permission
		change  func(e *pigeon.Engine) error
		revoked bool
	}{
		{"role deleted", []pigeon.Permission{perm("", pub, recv)},
			func(e *pigeon.Engine) error { return e.DeleteRole(ctx, "member") }, true},
		{"receive dropped", []pigeon.Permission{perm("", pub, recv)},
			putMember(perm("", pub)), true},
		{"publish dropped", []pigeon.Permission{perm("", pub, recv)},
			putMember(perm("", recv)), true},
		{"permissions emptied", []pigeon.Permission{perm("", pub, recv)},
			putMember(), true},
		{"selector added", []pigeon.Permission{perm("", pub, recv)},
			putMember(perm("/room=lobby", pub, recv)), true},
		{"selector replaced", []pigeon.Permission{perm("/room=lobby", pub, recv)},
			putMember(perm("/room=kitchen", pub, recv)), true},
		{"one of two selectors dropped", []pigeon.Permission{perm("/room=lobby", pub, recv), perm("/room=kitchen", pub, recv)},
			putMember(perm("/room=lobby", pub, recv)), true},
		{"subject renamed", []pigeon.Permission{perm("", pub, recv)},
			putMember(pigeon.Permission{Subject: "chat.messages", Operations: []pigeon.Operation{pub, recv}}), true},

		{"same definition again", []pigeon.Permission{perm("/room=lobby", pub, recv)},
			putMember(perm("/room=lobby", pub, recv)), false},
		{"operation added", []pigeon.Permission{perm("", pub, recv)},
			putMember(perm("", pub, recv, ack)), false},
		{"selector removed (wider)", []pigeon.Permission{perm("/room=lobby", pub, recv)},
			putMember(perm("", pub, recv)), false},
		{"another selector added (wider)", []pigeon.Permission{perm("/room=lobby", pub, recv)},
			putMember(perm("/room=lobby", pub, recv), perm("/room=kitchen", pub, recv)), false},
		{"unrelated role deleted", []pigeon.Permission{perm("", pub, recv)},
			func(e *pigeon.Engine) error { return e.DeleteRole(ctx, "other") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := accessFixture(t)
			e := f.e
			_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: tc.before})
			require.NoError(t, err)
			_, err = e.PutRole(ctx, pigeon.Role{Name: "other", Permissions: []pigeon.Permission{{Subject: "jobs.run", Operations: []pigeon.Operation{recv}}}})
			require.NoError(t, err)
			_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member", "other"}})
			require.NoError(t, err)
			c := f.connect("carol-token", "rooms.chat")
			var mu sync.Mutex
			var got []string
			sub, err := c.Subscribe(ctx, "rooms.chat", func(_ context.Context, d *pigeon.Delivery) error {
				var m map[string]string
				_ = json.Unmarshal(d.Message.Data, &m)
				mu.Lock()
				got = append(got, m["text"])
				mu.Unlock()
				return nil
			})
			require.NoError(t, err)
			_, err = c.Publish(ctx, chatIn("lobby", "before"))
			require.NoError(t, err)

			require.NoError(t, tc.change(e))
			if !tc.revoked {
				_, err = c.Publish(ctx, chatIn("lobby", "after"))
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return slices.Contains(got, "after")
				}, 30*time.Second, 5*time.Millisecond, "the subscription keeps receiving")
				return
			}
			_, err = c.Publish(ctx, chatIn("lobby", "after"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			requireStopped(t, sub, pigeon.CodeGrantRevoked)
		})
	}
}

func putMember(perms ...pigeon.Permission) func(e *pigeon.Engine) error {
	return func(e *pigeon.Engine) error {
		_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: perms})
		return err
	}
}

// A role permission whose selector does not parse (written to the store
// behind PutRole's back) grants nothing: it never opens the whole subject.
func TestStoredRoleWithBadSelectorGrantsNothing(t *testing.T) {
	st := memory.New(nil)
	t.Cleanup(func() { _ = st.Close(ctx) })
	role := `{"name":"member","permissions":[
		{"subject":"rooms.chat","operations":["publish"],"selector":"room=lobby"},
		{"subject":"rooms.chat","operations":["receive"],"selector":"/room=lobby"}]}`
	require.NoError(t, st.Put(ctx, "roles", "member", []byte(role)))
	acct := `{"id":"` + carol + `","roles":["member"],"createdAt":"2026-11-29T12:00:00Z"}`
	require.NoError(t, st.Put(ctx, "accounts", carol, []byte(acct)))
	var logs strings.Builder
	var logMu sync.Mutex
	f := accessFixture(t, func(o *pigeon.Options) {
		o.Store = st
		o.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	})
	c := f.connect("carol-token", "rooms.chat")
	info := c.Contract().Info().Subjects[0]
	require.Equal(t, []pigeon.Operation{pigeon.OpReceive}, info.Operations, "the bad permission grants no publish")
	require.Equal(t, []string{"/room=lobby"}, info.Scope[pigeon.OpReceive])
	_, err := c.Publish(ctx, chatIn("kitchen", "psst"))
	requireCode(t, err, pigeon.CodeOperationNotInContract)
	logMu.Lock()
	defer logMu.Unlock()
	require.Contains(t, logs.String(), "does not parse")
	require.Contains(t, logs.String(), "role=member")
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestRoleRemovalEndsAWaitingSubscription: a subscription whose window is
// full (its handler holds a delivery unanswered) stops as soon as the role
// it relied on is deleted, not once the handler answers or the ack wait
// passes; nothing more is handed over.
func TestRoleRemovalEndsAWaitingSubscription(t *testing.T) {
	f := accessFixture(t)
	e := f.e
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{
		{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish, pigeon.OpReceive}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	c := f.connect("carol-token", "rooms.chat")
	p, err := e.Authenticate(ctx, "carol-token")
	require.NoError(t, err)
	held := make(chan func(error), 10)
	sub, err := e.SubscribeAsync(ctx, pigeon.Caller{Principal: p, ContractID: c.Contract().ID(), Region: "uk"}, "rooms.chat",
		func(_ context.Context, _ *pigeon.Delivery, done func(error)) { held <- done }, // answered only at the end
		pigeon.WithMaxInFlight(1))
	require.NoError(t, err)
	for _, text := range []string{"one", "two"} {
		_, err := c.Publish(ctx, chatIn("lobby", text))
		require.NoError(t, err)
	}
	var answer func(error)
	select {
	case answer = <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	var once sync.Once
	done := func() { once.Do(func() { answer(nil) }) }
	t.Cleanup(done) // before the engine shuts down, which waits for it
	// Let the second message reach the full window.
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, e.DeleteRole(ctx, "member"))
	// The ack wait is 30 s: within 10 the subscription has stopped. (This
	// bound is the point, not a hang's: it must stay well below the ack
	// wait, whose end would free the window anyway.)
	require.Eventually(t, func() bool { return sub.Err() != nil }, 10*time.Second, 5*time.Millisecond,
		"the subscription waited for its window after the role was deleted")
	requireCode(t, sub.Err(), pigeon.CodeGrantRevoked)
	done()
	<-sub.Done()
	require.Empty(t, held, "nothing handed over after the role was deleted")
}
