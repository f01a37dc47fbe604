package pigeon_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// principalOf is an Authenticator of bearer strings that returns, for
// every credential, the principal p: an application's own, or an
// identity provider's with a bug.
func principalOf(p pigeon.Principal) pigeon.Authenticator {
	return pigeon.AuthenticatorFunc(func(context.Context, string) (*pigeon.Principal, error) {
		out := p
		return &out, nil
	})
}

// credentialPrincipalOf is the same as a CredentialAuthenticator, the
// kind a chain of methods is.
type credentialPrincipalOf struct{ pigeon.Authenticator }

func (a credentialPrincipalOf) AuthenticateCredential(ctx context.Context, c pigeon.Credential) (*pigeon.Principal, error) {
	return a.Authenticate(ctx, c.Bearer)
}

// The principal any authenticator returns, the application's own
// included, is held to the bounds the engine keeps on every principal: an
// id of at most MaxPrincipalIDLength bytes, and attributes within an
// account's bounds (at most MaxAccountAttributes, names and values
// bounded, text without a control or formatting character). One that
// breaks them is refused UNAUTHENTICATED and audited as a refused
// credential, however the authenticator is called (Authenticate, a
// CredentialAuthenticator, Connect); the error quotes no value. A
// principal at the bounds is taken. Before, a custom Authenticator's
// 64 KiB id or 1000 attributes were copied into every contract, lease,
// audit record and policy condition of the principal.
func TestAuthenticatedPrincipalIsHeldToTheBounds(t *testing.T) {
	long := strings.Repeat("v", pigeon.MaxAttributeValueLength+1)
	refused := []struct {
		name string
		p    pigeon.Principal
	}{
		{"64 KiB id", pigeon.Principal{ID: strings.Repeat("p", 64<<10)}},
		{"id one byte over", pigeon.Principal{ID: strings.Repeat("p", pigeon.MaxPrincipalIDLength+1)}},
		{"1000 attributes", pigeon.Principal{ID: "alice", Attributes: attributesOf(1000, "x")}},
		{"one attribute too many", pigeon.Principal{ID: "alice", Attributes: attributesOf(pigeon.MaxAccountAttributes+1, "x")}},
		{"a value too long", pigeon.Principal{ID: "alice", Attributes: map[string]string{"team": long}}},
		{"a name too long", pigeon.Principal{ID: "alice", Attributes: map[string]string{strings.Repeat("n", pigeon.MaxAttributeNameLength+1): "x"}}},
		{"an empty name", pigeon.Principal{ID: "alice", Attributes: map[string]string{"": "x"}}},
		{"U+202E in a value", pigeon.Principal{ID: "alice", Attributes: map[string]string{"team": "pay\u202ements"}}},
		{"ESC in a name", pigeon.Principal{ID: "alice", Attributes: map[string]string{"te\x1bam": "x"}}},
		{"a value not UTF-8", pigeon.Principal{ID: "alice", Attributes: map[string]string{"team": "pay\xff"}}},
		{"one role too many", pigeon.Principal{ID: "alice", Roles: rolesOf(pigeon.MaxPrincipalRoles + 1)}},
		{"a role with a newline", pigeon.Principal{ID: "alice", Roles: []string{"admin\nvvv"}}},
		{"a role with U+202E", pigeon.Principal{ID: "alice", Roles: []string{"nimda\u202evvv"}}},
		{"an empty role", pigeon.Principal{ID: "alice", Roles: []string{""}}},
	}
	for _, tc := range refused {
		for _, kind := range []string{"Authenticator", "CredentialAuthenticator"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				f := newFixture(t, func(o *pigeon.Options) {
					o.Authenticator = principalOf(tc.p)
					if kind == "CredentialAuthenticator" {
						o.Authenticator = credentialPrincipalOf{o.Authenticator}
					}
				})
				p, err := f.e.Authenticate(ctx, "token")
				pe := requireCode(t, err, pigeon.CodeUnauthenticated)
				require.Nil(t, p)
				require.NotContains(t, pe.Message, "ppp", "the error quotes no id")
				require.NotContains(t, pe.Message, "vvv", "the error quotes no value")
				require.Equal(t, 1, auditCount(t, f.e, pigeon.EventAuthFailed, pigeon.CodeUnauthenticated))
				_, err = f.e.Connect(ctx, "token", []string{"chat.messages"})
				requireCode(t, err, pigeon.CodeUnauthenticated)
			})
		}
	}

	for _, p := range []pigeon.Principal{
		{ID: strings.Repeat("p", pigeon.MaxPrincipalIDLength)},
		{ID: "alice", Attributes: attributesOf(pigeon.MaxAccountAttributes, strings.Repeat("v", pigeon.MaxAttributeValueLength))},
		{ID: "alice", Attributes: map[string]string{"team": "مرحبا"}},
		{ID: "alice", Roles: rolesOf(pigeon.MaxPrincipalRoles)},
	} {
		f := newFixture(t, func(o *pigeon.Options) { o.Authenticator = principalOf(p) })
		got, err := f.e.Authenticate(ctx, "token")
		require.NoError(t, err, "a principal at the bounds is taken")
		require.Equal(t, p.ID, got.ID)
		require.Equal(t, p.Attributes, got.Attributes)
		require.Equal(t, p.Roles, got.Roles)
	}
}

// rolesOf is n role names.
func rolesOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "role-" + strconv.Itoa(i)
	}
	return out
}
