package pigeon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestMayPublishAtDepth: only a principal holding pigeon.RoleBridge may
// publish at a depth over a transport (the WebSocket publish frame's
// "hops"), as its credential and its account stand at the call: a role
// its static token carries, one its account holds, one a grant names of
// its account's; not one taken from the account since the principal
// authenticated, nor a grant's once revoked. Nobody holds it by default.
func TestMayPublishAtDepth(t *testing.T) {
	ctx := context.Background()
	static := pigeon.NewStaticTokens(
		pigeon.StaticToken{Token: "plain", Principal: "plain"},
		pigeon.StaticToken{Token: "admin", Principal: "admin", Roles: []string{pigeon.RoleAdmin}},
		pigeon.StaticToken{Token: "token-bridge", Principal: "token-bridge", Roles: []string{pigeon.RoleBridge}},
		pigeon.StaticToken{Token: "account-bridge", Principal: "account-bridge"})
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: grantsThen{static}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: "account-bridge", Roles: []string{pigeon.RoleBridge, "other"}})
	require.NoError(t, err)
	who := func(credential string) *pigeon.Principal {
		t.Helper()
		p, err := e.Authenticate(ctx, credential)
		require.NoError(t, err)
		return p
	}
	withRole, withoutRole := func() *pigeon.Principal {
		g, err := e.IssueGrant(ctx, "account-bridge", []string{pigeon.RoleBridge}, time.Hour)
		require.NoError(t, err)
		return who(g.Token)
	}(), func() *pigeon.Principal {
		g, err := e.IssueGrant(ctx, "account-bridge", []string{"other"}, time.Hour)
		require.NoError(t, err)
		return who(g.Token)
	}()
	for _, tc := range []struct {
		name string
		p    *pigeon.Principal
		may  bool
	}{
		{"nobody", nil, false},
		{"a plain token", who("plain"), false},
		{"an admin", who("admin"), false},
		{"the role on the token", who("token-bridge"), true},
		{"the role on the account", who("account-bridge"), true},
		{"a grant naming the role", withRole, true},
		{"a grant not naming it", withoutRole, false},
		{"built by hand with the role", &pigeon.Principal{ID: "hand", Roles: []string{pigeon.RoleBridge}}, true},
	} {
		require.Equal(t, tc.may, e.MayPublishAtDepth(tc.p), tc.name)
	}

	before := who("account-bridge")
	_, err = e.RemoveAccountRole(ctx, "account-bridge", pigeon.RoleBridge)
	require.NoError(t, err)
	require.False(t, e.MayPublishAtDepth(before), "a role taken from the account since it authenticated")
	require.False(t, e.MayPublishAtDepth(withRole), "a grant's role its account no longer holds")
}

// TestSessionPublishAt: the in-process session is a DepthPublisher, for
// its embedder (a bridge in process): what it publishes at h is judged,
// answered, stored and delivered at h whatever the message said, and a
// closed session publishes nothing.
func TestSessionPublishAt(t *testing.T) {
	h := newHopsEngine(t)
	dp, ok := h.sess.(pigeon.DepthPublisher)
	require.True(t, ok, "the in-process session is a DepthPublisher")
	for _, hops := range []uint32{0, 4, 1<<32 - 1} {
		res, err := dp.PublishAt(ctx, &pigeon.Message{Type: "t", Subject: "hops", Intent: "test", Hops: 99}, hops)
		require.NoError(t, err)
		h.requireHops(t, res, hops)
	}
	require.NoError(t, h.sess.Close(ctx))
	_, err := dp.PublishAt(ctx, &pigeon.Message{Type: "t", Subject: "hops", Intent: "test"}, 4)
	require.Equal(t, pigeon.CodeSessionClosed, pigeon.ErrorCode(err))
}

// grantsThen authenticates grant tokens, then its static tokens.
type grantsThen struct{ static *pigeon.StaticTokens }

func (a grantsThen) Authenticate(ctx context.Context, s string) (*pigeon.Principal, error) {
	return a.AuthenticateCredential(ctx, pigeon.Credential{Bearer: s})
}

func (a grantsThen) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	p, err := pigeon.GrantTokens().Authenticate(ctx, c.Bearer)
	if err == nil || !errors.Is(err, pigeon.ErrUnrecognized) {
		return p, err
	}
	return a.static.Authenticate(ctx, c.Bearer)
}
